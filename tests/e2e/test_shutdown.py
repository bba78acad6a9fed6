"""SIGTERM with a backlog, and a client that hangs up before a stream's headers, against a real
``serve`` process: nothing is lost from the request log, and nothing is a 500."""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import sqlite3
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from hybrid_gateway.tools.processes import (
    ManagedProcess,
    python_module_argv,
    start_process,
    stop_process,
)
from tests.e2e.conftest import e2e_config
from tests.e2e.stack import channel, long_question, write_config

GRACE_S = 5.0

# lane -> the emulator model name that gives it its timing (e2e_config's light emulator)
LANES = {
    "stalled": "m@stall=30",  # never answers within the grace period: cancelled
    "finisher": "m@stall=0.5",  # answers within it
    "trickle": "light-model@slow=0.5",  # a stream of a token every 0.5 s: cut by the drain
    "late-headers": "m@stall=1.5",  # a stream whose headers wait 1.5 s (the hang-up case)
}


@dataclass(frozen=True)
class Answer:
    lane: str
    status: int
    request_id: str
    body: str


def gateway_config(emulators: tuple[str, str], folder: Path, semantic: bool) -> Path:
    config = e2e_config(*emulators, folder / "requests.sqlite3")
    light = emulators[0] + "/v1"
    for lane, model in LANES.items():
        config["channels"][lane] = channel(light, model, timeout_s=60)
        config["lanes"][lane] = {"channel": lane}
        config["models"].append({"id": lane, "lane": lane})
    if semantic:  # its embedder must outlive every request that uses it
        config["cache"]["semantic"] = {"enabled": True, "path": str(folder / "semantic.sqlite3")}
    return write_config(folder / "gateway.yaml", config)


@pytest.fixture
def started(
    emulators: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[ManagedProcess, Path]]:
    semantic = bool(getattr(request, "param", False))
    path = gateway_config(emulators, tmp_path, semantic)
    argv = python_module_argv("hybrid_gateway.cli", "serve", "--config", str(path),
                              "--grace-s", str(GRACE_S))  # fmt: skip
    process = start_process("gateway-shutdown", argv, tmp_path / "logs", timeout_s=60)
    try:
        yield process, tmp_path / "requests.sqlite3"
    finally:
        stop_process(process)


def post(url: str, lane: str, text: str, stream: bool = False) -> Answer:
    body = {"model": lane, "messages": [{"role": "user", "content": text}], "stream": stream}
    request = urllib.request.Request(
        url + "/v1/chat/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return Answer(lane, response.status, response.headers["x-request-id"],
                          response.read().decode())  # fmt: skip
    except urllib.error.HTTPError as exc:
        return Answer(lane, exc.code, exc.headers["x-request-id"], exc.read().decode())


def logged(log_path: Path) -> dict[str, tuple[int, str | None]]:
    with sqlite3.connect(log_path) as db:
        rows = db.execute("SELECT request_id, status, error_code FROM requests").fetchall()
    return {rid: (status, code) for rid, status, code in rows}


def readyz(connection: http.client.HTTPConnection) -> int:
    connection.request("GET", "/readyz")
    response = connection.getresponse()
    response.read()
    return response.status


@pytest.mark.parametrize("started", [True], indirect=True)
def test_sigterm_drains_within_grace_and_logs_every_request(
    started: tuple[ManagedProcess, Path],
) -> None:
    process, log_path = started
    address = urlsplit(process.url)
    host, port = str(address.hostname), int(address.port or 80)
    kept = http.client.HTTPConnection(host, port, timeout=10)  # open before the SIGTERM
    # 503 until the embedder has answered once (the bundled model loads on first use)
    deadline = time.monotonic() + 30
    while readyz(kept) != 200:
        assert time.monotonic() < deadline, "never ready"
        time.sleep(0.1)
    plan = [("stalled", False)] * 4 + [("finisher", False)] * 3 + [("trickle", True)] * 3
    with ThreadPoolExecutor(len(plan)) as pool:
        futures = [
            pool.submit(
                post, process.url, lane, long_question(f"drain {lane}", 20, "light"), stream
            )
            for lane, stream in plan
        ]
        time.sleep(1.0)  # all of them in flight
        signalled = time.monotonic()
        process.popen.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert readyz(kept) == 503  # a connection opened before still gets an answer
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, port), timeout=2).close()  # nothing new accepted
        assert process.popen.wait(timeout=GRACE_S + 10) == 0
        took = time.monotonic() - signalled
        answers = [future.result() for future in futures]
    kept.close()
    assert took < GRACE_S + 1.5, took
    rows = logged(log_path)
    for answer in answers:
        assert answer.request_id in rows, answer  # every request is in the request log
        if answer.lane == "finisher":
            assert (answer.status, rows[answer.request_id]) == (200, (200, None))
        else:  # cancelled by the drain, and told so
            assert rows[answer.request_id] == (503, "shutting_down"), answer
            assert '"code":"shutting_down"' in answer.body.replace(" ", "")
            assert answer.status == (200 if answer.lane == "trickle" else 503)
    stderr = process.stderr_path.read_text()
    assert "Traceback" not in stderr and "cannot schedule new futures" not in stderr
    drained = re.search(r"msg=drained in_flight=(\d+) cancelled=(\d+) unfinished=(\d+)", stderr)
    assert drained is not None  # the finishers may be done before the signal: 7 to 10 in flight
    assert 7 <= int(drained[1]) <= 10 and (drained[2], drained[3]) == ("7", "0")


def test_a_hang_up_before_the_stream_headers_is_logged_499(
    started: tuple[ManagedProcess, Path],
) -> None:
    process, log_path = started
    address = urlsplit(process.url)
    messages = [{"role": "user", "content": "hang up early"}]
    body = json.dumps({"model": "late-headers", "stream": True, "messages": messages}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {address.netloc}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")  # fmt: skip
    with socket.create_connection((str(address.hostname), int(address.port or 80))) as client:
        client.sendall(head.encode() + body)
        time.sleep(0.3)  # the gateway waits for the upstream's first byte: no headers yet
    deadline = time.monotonic() + 15
    rows: dict[str, Any] = {}
    while time.monotonic() < deadline and not rows:
        rows = {rid: row for rid, row in logged(log_path).items() if row[0] != 200}
        time.sleep(0.1)
    assert list(rows.values()) == [(499, "client_closed_request")]
    stderr = process.stderr_path.read_text()
    assert "Traceback" not in stderr and "internal_error" not in stderr
    assert "status=499 error=client_closed_request" in stderr
