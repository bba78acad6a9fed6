"""One contract for both records stores (request log + feedback): SQLite and PostgreSQL.

Every test runs against ``SqliteRequestLog`` (a file in a temp dir) and ``PostgresRequestLog``
(a fresh database on the session's pgserver), with the SQL the callers really send: the budget
rebuild, the feedback queries and the ``rated_requests`` view.  The outage tests are in
``test_records_outage.py``.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from hybrid_gateway.feedback import FeedbackInput, Rating, Reason
from hybrid_gateway.observability.journal import MmapJournal
from hybrid_gateway.observability.journaled_log import RequestLog
from hybrid_gateway.observability.log_rows import (
    CATEGORY_CHARS,
    COLUMN_TYPES,
    COLUMNS,
    note_category,
    record_row,
)
from hybrid_gateway.observability.prompts import PromptMode
from hybrid_gateway.observability.request_log import SqliteRequestLog
from hybrid_gateway.observability.request_log_pg import PostgresRequestLog
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.stores.health import StoreHealth
from hybrid_gateway.stores.postgres import PostgresPool
from hybrid_gateway.tenancy.budgets import BudgetBook
from hybrid_gateway.tenancy.settings import BudgetConfig
from hybrid_gateway.types import CacheOutcome, RequestRecord, RouteDecision, Usage

NOW = 1_780_000_000.0
MakeLog = Callable[..., RequestLog]


def record(
    request_id: str, *, tenant: str = "acme", at: float = NOW, cost: float = 0.25
) -> RequestRecord:
    return RequestRecord(
        request_id=request_id, started_at=at, model="auto", tenant=tenant, app="web",
        cache_key="k" * 16, route=RouteDecision("light", "light-emu", "how-to", score=0.125),
        usage=Usage(prompt_tokens=12, completion_tokens=30), cost_usd=cost, latency_ms=12.3456,
        upstream_ms=10.5, ttft_ms=4.25, retries=1,
        extra={"queue_ms": 1.5, "category": "maths", "cache_checks": "threshold,!numbers",
               "cache_entry": 2**40 + 7},
    )  # fmt: skip


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> tuple[str, str]:
    """The records store under test, and the URL of its PostgreSQL database ("" for SQLite)."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else ""
    return str(request.param), url


@pytest.fixture
def make_log(backend: tuple[str, str], tmp_path: Path) -> Iterator[MakeLog]:
    """``make_log(**options)`` opens a log on this test's database (the same one each time)."""
    opened: list[RequestLog] = []
    kind, url = backend

    def make(**options: Any) -> RequestLog:
        options.setdefault("flush_interval_s", 3600)  # rows move only when a test flushes
        log: RequestLog
        if kind == "sqlite":
            log = SqliteRequestLog(tmp_path / "requests.sqlite3", **options)
        else:
            health = StoreHealth(ManualClock(), retry_s=1.0)
            pool = PostgresPool(url, size=2, timeout_ms=2000, health=health)
            options.setdefault("other_writers_s", 0.0)  # no other replica writes here
            log = PostgresRequestLog(tmp_path / "requests", pool, **options)
        opened.append(log)
        return log

    yield make
    for log in opened:
        log.close()


def test_rows_read_back_exactly_as_built(make_log: MakeLog) -> None:
    log = make_log()
    records = [record("req_1"), record("req_2", tenant="beta"), record("req_3")]
    records[2].route = None
    records[2].usage = None
    records[2].cache = CacheOutcome.EXACT
    records[2].extra["saved_usd"] = 0.5
    for each in records:
        log.write(each)
    assert log.flush() == 3
    assert log.flush() == 0
    rows = log.query(f"SELECT {', '.join(COLUMNS)} FROM requests ORDER BY request_id")
    assert rows == [record_row(each) for each in records]
    assert log.query("SELECT request_id FROM requests WHERE tenant = ? AND ts >= ?",
                     ("acme", NOW)) == [("req_1",), ("req_3",)]  # fmt: skip


def test_budget_rebuild_sums_the_same_spend(make_log: MakeLog) -> None:
    log = make_log()
    for i, at in enumerate([NOW - 40 * 86_400, NOW - 3 * 86_400, NOW - 60, NOW - 30]):
        log.write(record(f"req_{i}", at=at, cost=0.5 + i))
    log.write(record("req_other", tenant="beta", at=NOW - 10, cost=100.0))
    log.flush()
    book = BudgetBook({"acme": BudgetConfig(daily=100.0, monthly=1000.0, timezone="UTC")})
    book.rebuild(log.query, NOW)
    assert book.spent("acme", NOW) == pytest.approx((2.5 + 3.5, 1.5 + 2.5 + 3.5))


def test_a_replayed_journal_adds_nothing_twice(make_log: MakeLog, tmp_path: Path) -> None:
    log = make_log()
    log.write(record("req_1"))
    log.flush()
    log.close()
    # A process that died: its journal holds one row already inserted and one not yet.
    stem = "requests.sqlite3" if isinstance(log, SqliteRequestLog) else "requests"
    journal = MmapJournal(tmp_path, stem)
    for each in (record("req_1"), record("req_2")):
        journal.append(orjson.dumps(record_row(each)))
    journal.close()
    reopened = make_log()
    assert reopened.query("SELECT request_id FROM requests ORDER BY request_id") == [
        ("req_1",), ("req_2",),
    ]  # fmt: skip
    # The leftover is gone once inserted: only the reopened log's own journal is left.
    assert len(list(tmp_path.glob(f"{stem}.journal.*"))) == 1


def test_retention_deletes_old_rows_only(make_log: MakeLog) -> None:
    log = make_log(retention_days=1.0, wall=lambda: NOW)
    log.write(record("req_old", at=NOW - 2 * 86_400))
    log.write(record("req_new", at=NOW - 3600))
    log.flush()
    assert log.expire() == 1  # type: ignore[attr-defined]
    assert log.query("SELECT request_id FROM requests") == [("req_new",)]


@pytest.mark.parametrize(
    ("mode", "stored"),
    [("none", None), ("hash", hashlib.sha256(b"mail a@b.io now").hexdigest()),
     ("redacted", "mail [redacted] now"), ("full", "mail a@b.io now")],
)  # fmt: skip
def test_prompt_modes_store_the_same_text(
    make_log: MakeLog, mode: PromptMode, stored: str | None
) -> None:
    log = make_log(prompts=mode)
    entry = record("req_1")
    log.note_prompt([{"role": "user", "content": "mail a@b.io now"}], entry)
    log.write(entry)
    log.flush()
    assert log.query("SELECT prompt FROM requests WHERE request_id = ?", ("req_1",)) == [(stored,)]


def test_the_declared_category_is_kept_cut_to_its_bound(make_log: MakeLog) -> None:
    log = make_log()
    declared = {"req_1": {"topic": "maths"}, "req_2": {"topic": "x" * 100},
                "req_3": {"topic": 7}, "req_4": None}  # fmt: skip
    for rid, metadata in declared.items():
        entry = record(rid)
        entry.extra.pop("category")
        note_category(metadata, "topic", entry)
        log.write(entry)
    log.flush()
    assert log.query("SELECT request_id, category FROM requests ORDER BY request_id") == [
        ("req_1", "maths"), ("req_2", "x" * CATEGORY_CHARS), ("req_3", None), ("req_4", None),
    ]  # fmt: skip


async def test_a_table_made_before_the_category_column_gains_it(
    backend: tuple[str, str], make_log: MakeLog, tmp_path: Path
) -> None:
    added = ("category", "cache_checks", "cache_entry")  # columns later versions added
    old = {c: t for c, t in COLUMN_TYPES.items() if c not in added}
    kind, url = backend
    if kind == "sqlite":  # as an older version made it: untyped columns
        with sqlite3.connect(tmp_path / "requests.sqlite3") as db:
            db.execute(f"CREATE TABLE requests ({', '.join(old)}, PRIMARY KEY (request_id))")
            db.execute("INSERT INTO requests (request_id, ts) VALUES ('req_old', 1.0)")
    else:
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(f"CREATE TABLE requests ({', '.join(f'{c} {t}' for c, t in old.items())})")
            db.execute("INSERT INTO requests (request_id, ts) VALUES ('req_old', 1.0)")
    log = make_log()
    log.write(record("req_new"))
    log.flush()
    columns = ", ".join(added)
    assert log.query(f"SELECT request_id, {columns} FROM requests ORDER BY request_id") == [
        ("req_new", "maths", "threshold,!numbers", 2**40 + 7), ("req_old", None, None, None),
    ]  # fmt: skip
    store = log.open_feedback()  # the view carries the new columns too
    await store.save("acme", FeedbackInput("req_new", Rating.DOWN), now=100.0)
    assert log.query(f"SELECT rating, {columns} FROM rated_requests") == [
        ("down", "maths", "threshold,!numbers", 2**40 + 7),
    ]  # fmt: skip
    await store.aclose()


async def test_feedback_save_get_find_and_the_view(make_log: MakeLog) -> None:
    log = make_log()
    store = log.open_feedback()
    log.write(record("req_1"))  # still journaled: the store flushes on a miss
    ref = await store.find_request("req_1")
    assert ref is not None
    assert (ref.tenant, ref.lane, ref.channel, ref.rule, ref.cache, ref.status) == (
        "acme", "light", "light-emu", "how-to", "miss", 200,
    )  # fmt: skip
    assert await store.find_request("req_never") is None
    first = await store.save("acme", FeedbackInput("req_1", Rating.UP), now=100.0)
    again = await store.save(
        "acme", FeedbackInput("req_1", Rating.DOWN, Reason.WRONG, "no"), now=200.0
    )
    assert (again.rating, again.reason, again.comment) == (Rating.DOWN, Reason.WRONG, "no")
    assert (again.created_at, again.updated_at) == (first.created_at, 200.0)
    assert await store.get("req_1") == again
    assert await store.get("req_never") is None
    rated = log.query(
        "SELECT rating, reason, rated_at, tenant, lane, cost_usd FROM rated_requests "
        "WHERE request_id = ?", ("req_1",),
    )  # fmt: skip
    assert rated == [("down", "wrong", 200.0, "acme", "light", 0.25)]
    await store.aclose()
