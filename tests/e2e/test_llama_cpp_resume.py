"""Stream resuming against a real inference server: two llama.cpp processes (SmolLM2) behind one
pooled channel; the one streaming a greedy answer is SIGKILLed part-way, and the client's stream
(the official SDK) ends with the same answer the other server gives, each token once."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.stack import closed_port, gateway, pool_config, write_config
from tests.e2e.test_endpoint_reload import endpoint_of
from tests.e2e.test_llama_cpp import start_llama_server, wait_ready

pytestmark = pytest.mark.llama

QUESTION: Any = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[tuple[str, subprocess.Popen[bytes]]]]:
    started: list[tuple[str, subprocess.Popen[bytes]]] = []
    try:
        for name in ("llama0", "llama1"):
            port = closed_port()
            process = start_llama_server(port, tmp_path / f"{name}.log", threads=1)
            started.append((f"http://127.0.0.1:{port}", process))
        for url, process in started:
            wait_ready(url, process, timeout_s=120)
        yield started
    finally:
        for _, process in started:
            process.kill()
            process.wait()


def test_a_greedy_stream_whose_llama_cpp_server_dies_is_finished_by_the_other(
    servers: list[tuple[str, subprocess.Popen[bytes]]], tmp_path: Path
) -> None:
    endpoints = [{"url": url + "/v1", "name": f"llama{i}"} for i, (url, _) in enumerate(servers)]
    # resume_streams: deterministic (the default): the request below asks temperature 0
    config = pool_config({
        "model": "smollm2", "timeout_s": 60, "connect_timeout_s": 2, "profile": "auto",
        "endpoints": endpoints, "balancing": {"policy": "round_robin"},
    })  # fmt: skip
    path = write_config(tmp_path / "gateway.yaml", config)
    ask: Any = {"model": "light", "messages": QUESTION, "temperature": 0, "max_tokens": 160}
    with (
        gateway(path, "gateway-llama-resume") as gw,
        openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=120) as client,
    ):
        raw = client.chat.completions.with_raw_response.create(stream=True, **ask)
        assert endpoint_of(raw.headers) == "llama0"  # round robin's first pick
        chunks: Iterator[Any] = iter(raw.parse())
        first = [next(chunks) for _ in range(8)]  # under way on llama0 ...
        servers[0][1].kill()  # ... when it dies
        rest = list(chunks)
        streamed = "".join(c.choices[0].delta.content or "" for c in [*first, *rest] if c.choices)
        again = client.chat.completions.create(**ask)  # llama1 answers (llama0 is gone)
    assert streamed == again.choices[0].message.content
    assert len(streamed) > 200
    log = gw.process.stderr_path.read_text()
    assert "stream broke on endpoint llama0 after" in log and "resending to llama1" in log
