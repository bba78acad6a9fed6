"""``server.request_log.retention_days`` and ``prompts`` in a real gateway process."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import openai

from hybrid_gateway.observability.request_log import SqliteRequestLog
from hybrid_gateway.types import RequestRecord
from tests.e2e.conftest import e2e_config
from tests.e2e.stack import gateway, write_config


def test_old_rows_expire_on_start_and_prompts_are_redacted(
    emulators: tuple[str, str], tmp_path: Path
) -> None:
    log_path = tmp_path / "requests.sqlite3"
    seed = SqliteRequestLog(log_path, flush_interval_s=60)
    seed.write(RequestRecord("req_ancient", time.time() - 40 * 86_400))
    seed.write(RequestRecord("req_recent", time.time() - 86_400))
    seed.close()
    config = e2e_config(*emulators, log_path)
    config["server"]["request_log"] |= {"retention_days": 30, "prompts": "redacted"}
    question = "Reach me at ann@example.org or +44 20 7946 0958, account 99887766"
    with gateway(write_config(tmp_path / "gateway.yaml", config)) as running:
        sdk = openai.OpenAI(base_url=running.base_url, api_key="x", max_retries=0)
        raw = sdk.chat.completions.with_raw_response.create(
            model="light", messages=[{"role": "user", "content": question}], max_tokens=8
        )
        sdk.close()
    request_id = raw.headers["x-request-id"]  # the clean shutdown flushed its row
    with sqlite3.connect(log_path) as db:
        rows = dict(db.execute("SELECT request_id, prompt FROM requests").fetchall())
    assert rows == {
        "req_recent": None,
        request_id: "Reach me at [redacted] or [redacted], account [redacted]",
    }
