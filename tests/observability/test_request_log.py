from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import orjson
from aiohttp.test_utils import TestClient, TestServer

from hybrid_gateway.api.app import create_app
from hybrid_gateway.api.routes import RUNTIME
from hybrid_gateway.config import parse_config
from hybrid_gateway.observability.request_log import SqliteRequestLog, record_row
from hybrid_gateway.types import CacheOutcome, RequestRecord, RouteDecision, Usage


def record(i: int) -> RequestRecord:
    return RequestRecord(
        request_id=f"req_{i}",
        started_at=time.time(),
        model="auto",
        route=RouteDecision("light", "light-local", "short-single-turn"),
        cache=CacheOutcome.MISS,
        usage=Usage(10, 20),
        cost_usd=0.001,
        latency_ms=12.5,
    )


def count(log: SqliteRequestLog) -> int:
    return int(log.query("SELECT count(*) FROM requests")[0][0])


def test_write_flush_and_fields(tmp_path: Path) -> None:
    log = SqliteRequestLog(tmp_path / "r.sqlite3", flush_interval_s=60)
    for i in range(5):
        log.write(record(i))
    assert log.flush() == 5
    rows = log.query(
        "SELECT request_id, lane, channel, rule, cache, prompt_tokens, cost_usd "
        "FROM requests ORDER BY request_id"
    )
    assert rows[0] == ("req_0", "light", "light-local", "short-single-turn", "miss", 10, 0.001)
    assert log.flush() == 0
    log.close()


def test_background_thread_flushes(tmp_path: Path) -> None:
    log = SqliteRequestLog(tmp_path / "r.sqlite3", flush_interval_s=0.01)
    log.write(record(1))
    deadline = time.monotonic() + 5
    while count(log) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert count(log) == 1
    log.close()


def test_journal_survives_a_crash_and_is_replayed(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    script = f"""
import os, sys, time
sys.path.insert(0, {str(Path(__file__).resolve().parents[2] / "src")!r})
from hybrid_gateway.observability.request_log import SqliteRequestLog, record_row
from hybrid_gateway.types import RequestRecord
log = SqliteRequestLog(__import__("pathlib").Path({str(path)!r}), flush_interval_s=600)
for i in range(3):
    log.write(RequestRecord(request_id=f"req_{{i}}", started_at=time.time()))
os._exit(0)  # die like a killed process: no flush, no close, no atexit
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert [p.name for p in tmp_path.glob("*.journal.*")], "the dead process left its journal"
    restarted = SqliteRequestLog(path, flush_interval_s=60)
    assert count(restarted) == 3
    restarted.close()
    assert not list(tmp_path.glob("*.journal*"))


def test_torn_lines_and_zero_tails_are_skipped(tmp_path: Path) -> None:
    row = orjson.dumps(record_row(record(7)))
    (tmp_path / "r.sqlite3.journal.999.1").write_bytes(
        row + b"\n" + b'["req_torn", 1.5, "def' + b"\0" * 64
    )
    log = SqliteRequestLog(tmp_path / "r.sqlite3", flush_interval_s=60)
    assert log.query("SELECT request_id FROM requests") == [("req_7",)]
    log.close()


def test_a_live_writers_journal_is_not_taken(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    first = SqliteRequestLog(path, flush_interval_s=600)
    first.write(record(1))
    second = SqliteRequestLog(path, flush_interval_s=600)  # e.g. a second worker starting up
    assert count(second) == 0  # it did not replay (and delete) the first one's journal
    second.close()
    first.close()
    third = SqliteRequestLog(path, flush_interval_s=600)
    assert count(third) == 1
    third.close()


def test_replay_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    log = SqliteRequestLog(path, flush_interval_s=60)
    log.write(record(1))
    log.flush()
    log.write(record(1))  # the same id again (e.g. a journal replayed twice)
    log.close()
    again = SqliteRequestLog(path, flush_interval_s=60)
    assert count(again) == 1
    again.close()


def test_large_batches_span_several_statements(tmp_path: Path) -> None:
    log = SqliteRequestLog(tmp_path / "r.sqlite3", flush_interval_s=60)
    for i in range(1234):
        log.write(record(i))
    assert log.flush() == 1234
    assert count(log) == 1234
    log.close()


def test_every_value_reads_back_as_written_none_as_null(tmp_path: Path) -> None:
    """None goes in as a stand-in that SQLite turns into NULL; values near it (0, "", negative
    numbers, the largest 64-bit integers) must come back as they went in."""
    from hybrid_gateway.observability.request_log import COLUMNS

    sparse = RequestRecord(request_id="req_sparse", started_at=0.0)  # most columns None
    edgy = record(2)
    edgy.request_id, edgy.tenant, edgy.cost_usd = "req_edgy", "", -0.0
    edgy.usage, edgy.retries = Usage(0, 2**63 - 1), -(2**63) + 1
    edgy.extra["cache_entry"] = -1
    log = SqliteRequestLog(tmp_path / "r.sqlite3", flush_interval_s=60)
    for r in (sparse, edgy):
        log.write(r)
    log.flush()
    for r in (sparse, edgy):
        stored = log.query(
            f"SELECT {', '.join(COLUMNS)} FROM requests WHERE request_id = ?", (r.request_id,)
        )
        assert stored == [record_row(r)]
    nulls = log.query("SELECT count(*) FROM requests WHERE similarity IS NULL AND fallback IS NULL")
    assert nulls == [(2,)]
    log.close()


def test_statement_sizes_are_few_and_cover_the_batch() -> None:
    from hybrid_gateway.observability.request_log import _statement_sizes

    seen: set[int] = set()
    for rows in range(1, 2000):
        sizes = list(_statement_sizes(rows))
        assert sum(sizes) == rows
        seen.update(sizes)
    assert len(seen) <= 10


async def test_the_gateway_logs_the_category_the_gates_read(tmp_path: Path) -> None:
    """``metadata[routing.gates.metadata_key]`` lands in the ``category`` column."""
    path = tmp_path / "requests.sqlite3"
    config = parse_config({
        "channels": {"c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "lanes": {"light": {"channel": "c"}, "heavy": {"channel": "c"}},
        "server": {"request_log": {"path": str(path), "flush_interval_ms": 60_000}},
        "routing": {"gates": {"heavy_categories": ["maths"], "metadata_key": "topic"}},
    })  # fmt: skip
    sent = [{"topic": "maths", "category": "other"}, {"category": "maths"}, None]
    async with TestClient(TestServer(create_app(config))) as client:
        for metadata in sent:  # an unknown model: refused (404) after the log noted it
            body = {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}
            response = await client.post("/v1/chat/completions", json=body | {"metadata": metadata})
            assert response.status == 404
        log = client.app[RUNTIME].request_log
        assert log is not None
        log.flush()
        rows = log.query("SELECT category FROM requests ORDER BY ts, request_id")
    assert sorted(rows, key=str) == sorted([("maths",), (None,), (None,)], key=str)
