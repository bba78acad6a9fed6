from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hybrid_gateway.feedback import FeedbackInput, Rating, Reason, SqliteFeedbackStore
from hybrid_gateway.observability.request_log import SqliteRequestLog
from hybrid_gateway.types import CacheOutcome, RequestRecord, RouteDecision


def record(request_id: str, tenant: str = "default") -> RequestRecord:
    return RequestRecord(
        request_id=request_id,
        started_at=time.time(),
        model="auto",
        tenant=tenant,
        route=RouteDecision("light", "light-local", "how-to"),
        cache=CacheOutcome.MISS,
    )


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[SqliteRequestLog]:
    # A flush interval longer than any test: rows stay journaled until someone flushes.
    request_log = SqliteRequestLog(tmp_path / "requests.sqlite3", flush_interval_s=3600)
    yield request_log
    request_log.close()


async def test_a_request_still_in_the_journal_is_found(log: SqliteRequestLog) -> None:
    store = SqliteFeedbackStore(log.path, flush_requests=log.flush)
    log.write(record("req_fresh", tenant="acme"))
    ref = await store.find_request("req_fresh")
    assert ref is not None
    assert (ref.tenant, ref.lane, ref.channel, ref.rule, ref.cache, ref.status) == (
        "acme", "light", "light-local", "how-to", "miss", 200,
    )  # fmt: skip
    assert await store.find_request("req_never") is None
    await store.aclose()


async def test_without_a_flush_hook_only_flushed_rows_are_found(log: SqliteRequestLog) -> None:
    store = SqliteFeedbackStore(log.path)
    log.write(record("req_1"))
    assert await store.find_request("req_1") is None
    log.flush()
    assert await store.find_request("req_1") is not None
    await store.aclose()


async def test_save_then_change_of_mind_keeps_the_first_time(log: SqliteRequestLog) -> None:
    store = SqliteFeedbackStore(log.path, flush_requests=log.flush)
    log.write(record("req_1"))
    first = await store.save("default", FeedbackInput("req_1", Rating.UP), now=100.0)
    assert (first.rating, first.reason, first.created_at, first.updated_at) == (
        Rating.UP, None, 100.0, 100.0,
    )  # fmt: skip
    again = FeedbackInput("req_1", Rating.DOWN, Reason.WRONG, "wrong unit")
    second = await store.save("default", again, now=160.0)
    assert (second.rating, second.reason, second.comment) == (
        Rating.DOWN,
        Reason.WRONG,
        "wrong unit",
    )
    assert (second.created_at, second.updated_at) == (100.0, 160.0)
    assert await store.get("req_1") == second
    assert await store.get("req_2") is None
    await store.aclose()


async def test_feedback_joins_its_request_in_the_view(log: SqliteRequestLog) -> None:
    store = SqliteFeedbackStore(log.path, flush_requests=log.flush)
    for i in range(3):
        log.write(record(f"req_{i}"))
    log.flush()
    await store.save("default", FeedbackInput("req_1", Rating.DOWN, Reason.TOO_SLOW), now=1.0)
    rows = log.query("SELECT request_id, rating, reason, lane, rule FROM rated_requests")
    assert rows == [("req_1", "down", "too_slow", "light", "how-to")]
    await store.aclose()


async def test_a_second_store_on_the_same_file_sees_the_rows(log: SqliteRequestLog) -> None:
    """Restart: the table and its rows are still there, and the schema step is idempotent."""
    log.write(record("req_1"))
    store = SqliteFeedbackStore(log.path, flush_requests=log.flush)
    await store.save("default", FeedbackInput("req_1", Rating.UP), now=5.0)
    await store.aclose()
    reopened = SqliteFeedbackStore(log.path)
    saved = await reopened.get("req_1")
    assert saved is not None and saved.rating is Rating.UP
    await reopened.aclose()
