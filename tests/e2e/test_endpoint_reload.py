"""Hot reload of a pool's endpoints in a real gateway process with real emulator processes: a
stream is under way on one endpoint when a reload removes it and adds another; the stream
finishes whole, the new endpoint takes traffic at once, the removed one takes none, and once its
stream is done it is gone from /healthz and /metrics.  A second reload (SIGHUP) reweights."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.stack import Gateway, emulator, gateway, long_question, pool_config, write_config
from tests.e2e.test_hot_reload import ADMIN_KEY, post_reload


@pytest.fixture
def urls(tmp_path: Path) -> Iterator[dict[str, str]]:
    """emu0 decodes at the heavy profile's pace (a long stream takes seconds); emu1 and emu2
    answer at once."""
    logs = tmp_path / "emulators"
    with (
        emulator(logs, "emu0", "--profile", "heavy") as emu0,
        emulator(logs, "emu1", "--profile", "light", "--zero-delay") as emu1,
        emulator(logs, "emu2", "--profile", "light", "--zero-delay") as emu2,
    ):
        yield {name: e.url + "/v1" for name, e in (("emu0", emu0), ("emu1", emu1), ("emu2", emu2))}


def config(urls: dict[str, str], names: list[str], weights: dict[str, float]) -> dict[str, Any]:
    endpoints = [{"url": urls[n], "name": n, "weight": weights.get(n, 1.0)} for n in names]
    return pool_config({
        "model": "m", "connect_timeout_s": 1, "timeout_s": 30, "endpoints": endpoints,
        "balancing": {"policy": "round_robin"},
    })  # fmt: skip


def endpoint_of(headers: Any) -> str:
    route: str = headers["x-gateway-route"]
    return dict(part.split("=", 1) for part in route.split("; "))["endpoint"]


def ask(client: openai.OpenAI, n: int) -> Counter[str]:
    out = Counter[str]()
    for i in range(n):
        raw = client.chat.completions.with_raw_response.create(
            model="light", messages=[{"role": "user", "content": f"q {i}"}], max_tokens=4
        )
        assert raw.http_response.status_code == 200
        out[endpoint_of(raw.headers)] += 1
    return out


def get(gw: Gateway, path: str) -> str:
    with urllib.request.urlopen(gw.url + path, timeout=10) as answer:
        body: bytes = answer.read()
    return body.decode()


def pool_status(gw: Gateway) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in json.loads(get(gw, "/healthz"))["endpoints"]["pool"]}


def test_a_reload_adds_an_endpoint_and_drains_a_removed_one_without_losing_its_stream(
    urls: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYBRID_GATEWAY_ADMIN_KEY", ADMIN_KEY)
    path = write_config(tmp_path / "gateway.yaml", config(urls, ["emu0", "emu1"], {}))
    with (
        gateway(path, "gateway-endpoint-reload") as gw,
        openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=60) as client,
    ):
        raw = client.chat.completions.with_raw_response.create(
            model="light", stream=True,
            messages=[{"role": "user", "content": long_question("drain me", 150)}],
        )  # fmt: skip
        assert endpoint_of(raw.headers) == "emu0"  # round robin's first pick
        chunks = iter(raw.parse())
        first = next(chunks)  # under way on emu0 ...

        write_config(path, config(urls, ["emu1", "emu2"], {}))  # ... when emu0 is removed
        status, payload = post_reload(gw)
        assert status == 200, payload
        assert payload["endpoints"] == [{"channel": "pool", "added": ["emu2"],
                                         "removed": ["emu0"], "retuned": [],
                                         "balancing": ""}]  # fmt: skip
        states = pool_status(gw)
        assert states["emu0"]["state"] == "draining" and states["emu0"]["in_flight"] == 1
        assert (states["emu1"]["state"], states["emu2"]["state"]) == ("healthy", "healthy")

        during = ask(client, 8)  # the new endpoint takes traffic at once; emu0 none
        assert during == {"emu1": 4, "emu2": 4}

        rest = list(chunks)  # the stream on the removed endpoint finishes whole
        assert any(c.choices and c.choices[0].finish_reason == "stop" for c in rest)
        text = "".join(c.choices[0].delta.content or "" for c in [first, *rest] if c.choices)
        assert len(text.split()) > 40
        deadline = time.monotonic() + 5
        while "emu0" in pool_status(gw):  # drained: its connections closed, it is gone
            assert time.monotonic() < deadline, pool_status(gw)
            time.sleep(0.05)
        metrics = get(gw, "/metrics")
        assert 'endpoint="emu0"' not in metrics
        assert 'hybrid_gateway_endpoint_up{channel="pool",endpoint="emu2"} 1' in metrics

        write_config(path, config(urls, ["emu1", "emu2"], {"emu2": 3.0}))
        os.kill(gw.process.pid, signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "emu2: weight 1 -> 3" not in gw.process.stderr_path.read_text():
            assert time.monotonic() < deadline, "the SIGHUP reload was not logged"
            time.sleep(0.05)
        assert ask(client, 8) == {"emu1": 2, "emu2": 6}
    log = gw.process.stderr_path.read_text()
    assert "channel pool endpoints reloaded: added emu2; removed emu0" in log
    assert "requests in flight finish on: emu0 1" in log
