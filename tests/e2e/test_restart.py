"""A gateway that dies loses no request-log entry it had acknowledged."""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path

import openai
import pytest

from hybrid_gateway.tools.processes import stop_process
from tests.e2e.conftest import e2e_config
from tests.e2e.stack import start_gateway, write_config


def count_rows(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM requests").fetchone()[0])


def test_killed_gateway_keeps_acknowledged_log_entries(
    emulators: tuple[str, str], tmp_path: Path
) -> None:
    log_path = tmp_path / "requests.sqlite3"
    config = e2e_config(*emulators, log_path)
    # A flush interval far longer than the test: every row must come from the journal replay.
    config["server"]["request_log"]["flush_interval_ms"] = 600_000
    config_path = write_config(tmp_path / "gateway.yaml", config)
    first = start_gateway(config_path, "gateway-1")
    ids = []
    try:
        with openai.OpenAI(base_url=first.base_url, api_key="x", max_retries=0) as sdk:
            for i in range(15):
                raw = sdk.chat.completions.with_raw_response.create(
                    model="light", messages=[{"role": "user", "content": f"q{i}"}], max_tokens=4
                )
                ids.append(raw.headers["x-request-id"])
            with pytest.raises(openai.NotFoundError):
                sdk.chat.completions.create(
                    model="nope", messages=[{"role": "user", "content": "x"}]
                )
        os.kill(first.process.pid, signal.SIGKILL)  # no shutdown hook runs
        first.process.popen.wait(timeout=10)
    finally:
        stop_process(first.process)
    second = start_gateway(config_path, "gateway-2")
    try:
        assert count_rows(log_path) == 16
        with sqlite3.connect(log_path) as db:
            logged = {r[0] for r in db.execute("SELECT request_id FROM requests")}
        assert set(ids) <= logged
    finally:
        stop_process(second.process)
    assert count_rows(log_path) == 16
