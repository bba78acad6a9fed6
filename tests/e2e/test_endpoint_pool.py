"""A channel served by three real emulator processes: one is killed, requests keep succeeding;
it is started again on its port, and it takes traffic again (issue 22 acceptance)."""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from hybrid_gateway.tools.processes import (
    ManagedProcess,
    python_module_argv,
    start_process,
    stop_process,
)
from tests.e2e.stack import Gateway, closed_port, gateway, pool_config, write_config


def start_emulator(log_dir: Path, port: int, tag: str) -> ManagedProcess:
    args = ["--host", "127.0.0.1", "--port", str(port), "--profile", "light", "--zero-delay"]
    argv = python_module_argv("hybrid_gateway.cli", "emulate", *args)
    return start_process(f"emu-{port}-{tag}", argv, log_dir, timeout_s=30)


@pytest.fixture
def pool_stack(tmp_path: Path) -> Iterator[tuple[Gateway, list[int], dict[int, ManagedProcess]]]:
    ports = [closed_port() for _ in range(3)]
    emulators = {port: start_emulator(tmp_path, port, "a") for port in ports}
    config = pool_config({
        "model": "light-model", "connect_timeout_s": 1, "timeout_s": 10,
        "endpoints": [{"url": f"http://127.0.0.1:{p}/v1", "name": f"emu{i}"}
                      for i, p in enumerate(ports)],
        "balancing": {"policy": "round_robin"},
        "health": {"consecutive_failures": 2, "base_ejection_s": 0.5, "max_ejection_s": 1},
    }, request_log={"path": str(tmp_path / "requests.sqlite3"),
                    "flush_interval_ms": 50})  # fmt: skip
    path = write_config(tmp_path / "gateway.yaml", config)
    try:
        with gateway(path) as running:
            yield running, ports, emulators
    finally:
        for process in emulators.values():
            stop_process(process)


def ask(client: openai.OpenAI, i: int) -> str:
    raw = client.chat.completions.with_raw_response.create(
        model="light", messages=[{"role": "user", "content": f"question {i}"}], max_tokens=8
    )
    assert raw.http_response.status_code == 200
    route = raw.headers["x-gateway-route"]
    assert "policy=round_robin" in route
    return route.split("endpoint=")[1].split(";")[0]


def healthz(stack: Gateway) -> dict[str, Any]:
    with urllib.request.urlopen(stack.url + "/healthz", timeout=5) as response:
        body: dict[str, Any] = json.loads(response.read())
    return body


def test_a_killed_endpoint_is_ejected_without_failed_requests_and_taken_back(
    pool_stack: tuple[Gateway, list[int], dict[int, ManagedProcess]], tmp_path: Path
) -> None:
    stack, ports, emulators = pool_stack
    with openai.OpenAI(base_url=stack.base_url, api_key="x", max_retries=0) as client:
        before = Counter(ask(client, i) for i in range(12))
        assert before == {"emu0": 4, "emu1": 4, "emu2": 4}

        emulators[ports[1]].popen.kill()  # SIGKILL: no goodbye
        emulators[ports[1]].popen.wait(10)
        during = Counter(ask(client, i) for i in range(12, 30))  # every one answers
        assert "emu1" not in during and sum(during.values()) == 18
        states = {e["name"]: e["state"] for e in healthz(stack)["endpoints"]["pool"]}
        assert states["emu1"] in ("ejected", "probing") and states["emu0"] == "healthy"
        assert {"channel": "pool", "endpoint": "emu1", "problem": f"endpoint_{states['emu1']}"} \
            in healthz(stack)["problems"]  # fmt: skip

        emulators[ports[1]] = start_emulator(tmp_path, ports[1], "b")
        deadline, after = time.monotonic() + 15, Counter[str]()
        i = 30
        while after["emu1"] < 2 and time.monotonic() < deadline:
            after[ask(client, i)] += 1
            i += 1
            time.sleep(0.05)
        assert after["emu1"] >= 2, f"emu1 never came back: {after}"
    assert healthz(stack)["endpoints"]["pool"][1]["state"] == "healthy"
    time.sleep(0.3)  # the request log's flush interval
    with sqlite3.connect(tmp_path / "requests.sqlite3") as db:
        rows = db.execute("SELECT endpoint, endpoint_reason, status FROM requests").fetchall()
    assert {r[0] for r in rows} == {"emu0", "emu1", "emu2"}
    assert {r[1] for r in rows} == {"round_robin"} and {r[2] for r in rows} == {200}
