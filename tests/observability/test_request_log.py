from __future__ import annotations

import os
import time
from pathlib import Path

from hybrid_gateway.observability.request_log import SqliteRequestLog
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
    crashed = SqliteRequestLog(path, flush_interval_s=60)
    for i in range(3):
        crashed.write(record(i))
    # Simulate a crash: the process dies without flush or close; only the journal remains.
    os.close(crashed._fd)
    with open(path.with_name(path.name + ".journal"), "ab") as journal:
        journal.write(b'["req_torn", 1.5, "default"')  # a line torn mid-write
    restarted = SqliteRequestLog(path, flush_interval_s=60)
    assert count(restarted) == 3
    restarted.close()
    assert not list(tmp_path.glob("*.journal*"))


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


def test_statement_sizes_are_few_and_cover_the_batch() -> None:
    from hybrid_gateway.observability.request_log import _statement_sizes

    seen: set[int] = set()
    for rows in range(1, 2000):
        sizes = list(_statement_sizes(rows))
        assert sum(sizes) == rows
        seen.update(sizes)
    assert len(seen) <= 10
