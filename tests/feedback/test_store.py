"""SQLite-only feedback store behaviour.  What every records store must do (find a request
still in the journal, save and change of mind, the ``rated_requests`` view) is the contract
suite, tests/stores/test_records_contract.py, run on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hybrid_gateway.feedback import FeedbackInput, Rating, SqliteFeedbackStore
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


async def test_without_a_flush_hook_only_flushed_rows_are_found(log: SqliteRequestLog) -> None:
    store = SqliteFeedbackStore(log.path)
    log.write(record("req_1"))
    assert await store.find_request("req_1") is None
    log.flush()
    assert await store.find_request("req_1") is not None
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
