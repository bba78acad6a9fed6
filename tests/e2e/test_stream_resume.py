"""A replica SIGKILLed while it streams an answer, in a real gateway process with real emulator
processes: the client's stream (the official SDK) goes on from the other replica and ends with
the whole answer, each word once, as that replica gives it to the same question."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.stack import emulator, gateway, long_question, pool_config, write_config
from tests.e2e.test_endpoint_reload import endpoint_of


@pytest.fixture
def urls(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Both replicas decode at the heavy profile's pace (a long answer takes seconds)."""
    logs = tmp_path / "emulators"
    with (
        emulator(logs, "emu0", "--profile", "heavy") as emu0,
        emulator(logs, "emu1", "--profile", "heavy") as emu1,
    ):
        yield {"emu0": emu0, "emu1": emu1}


def config(urls: dict[str, Any]) -> dict[str, Any]:
    endpoints = [{"url": urls[n].url + "/v1", "name": n} for n in ("emu0", "emu1")]
    return pool_config({
        "model": "m", "connect_timeout_s": 1, "timeout_s": 30, "endpoints": endpoints,
        "balancing": {"policy": "round_robin"},  # resume_streams: deterministic (default)
    })  # fmt: skip


def test_a_stream_whose_replica_dies_is_finished_by_the_other(
    urls: dict[str, Any], tmp_path: Path
) -> None:
    path = write_config(tmp_path / "gateway.yaml", config(urls))
    messages: Any = [{"role": "user", "content": long_question("resume me", 150)}]
    with (
        gateway(path, "gateway-stream-resume") as gw,
        openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=60) as client,
    ):
        raw = client.chat.completions.with_raw_response.create(
            model="light", stream=True, temperature=0, messages=messages
        )
        assert endpoint_of(raw.headers) == "emu0"  # round robin's first pick
        chunks: Iterator[Any] = iter(raw.parse())
        first = [next(chunks) for _ in range(5)]  # under way on emu0 ...
        urls["emu0"].popen.kill()  # ... when it dies
        rest = list(chunks)
        ids = {c.id for c in [*first, *rest]}
        streamed = "".join(c.choices[0].delta.content or "" for c in [*first, *rest] if c.choices)
        assert any(c.choices and c.choices[0].finish_reason for c in rest)
        # the same question, asked again: emu1 answers it (emu0 is ejected or refuses)
        again = client.chat.completions.create(model="light", temperature=0, messages=messages)
    assert streamed == again.choices[0].message.content
    assert len(streamed.split()) > 40
    assert len(ids) == 1  # one stream id from start to end
    log = gw.process.stderr_path.read_text()
    assert "stream broke on endpoint emu0 after" in log and "resending to emu1" in log
