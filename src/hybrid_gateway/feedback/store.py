"""Feedback storage: a ``feedback`` table next to the request log's ``requests`` table.

With the embedded default that is the request log's SQLite file (WAL); with ``stores.records:
postgres`` the shared PostgreSQL (``store_pg.py``, the same tables and SQL).

Same file as the request log so that a feedback row joins its request by ``request_id`` in one
query (the ``rated_requests`` view), which is what the misroute review reads.  The store has its
own connection; WAL lets it read and write while the request log's flusher thread inserts.

A client may rate an answer right after receiving it, before the request log's background
flush has moved that request into the database: on a miss the store asks the log to flush once
and looks again, so a fresh request id is never answered 404.  With a shared database the
answer may have come from another replica, whose flusher this one cannot call: the store then
looks again for up to two of its flush intervals (``other_writers_s``) before answering 404.

The database calls run in a worker thread (``asyncio.to_thread``): feedback is rare, but a write
that waits on SQLite's lock must not stall the event loop that relays answers.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from hybrid_gateway.feedback.model import Feedback, FeedbackInput, Rating, Reason, RequestRef

_SCHEMA = """
CREATE TABLE IF NOT EXISTS feedback (
    request_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    rating TEXT NOT NULL CHECK (rating IN ('up', 'down')),
    reason TEXT,
    comment TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS feedback_updated_at ON feedback (updated_at);
CREATE VIEW IF NOT EXISTS rated_requests AS
    SELECT f.rating, f.reason, f.comment, f.updated_at AS rated_at, r.*
    FROM feedback AS f JOIN requests AS r USING (request_id);
"""

_LOOK_AGAIN_S = 0.05
_REQUEST_SQL = (
    "SELECT request_id, tenant, model, lane, channel, rule, cache, status "
    "FROM requests WHERE request_id = ?"
)
_UPSERT_SQL = """
INSERT INTO feedback (request_id, tenant, rating, reason, comment, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (request_id) DO UPDATE SET
    rating = excluded.rating, reason = excluded.reason, comment = excluded.comment,
    updated_at = excluded.updated_at
"""
_GET_SQL = (
    "SELECT request_id, tenant, rating, reason, comment, created_at, updated_at "
    "FROM feedback WHERE request_id = ?"
)


class FeedbackStore(Protocol):
    """Where feedback lives; the SQLite one below is the embedded default, PostgreSQL
    (``store_pg.py``) the shared one."""

    async def find_request(self, request_id: str) -> RequestRef | None: ...

    async def save(self, tenant: str, entry: FeedbackInput, now: float) -> Feedback: ...

    async def get(self, request_id: str) -> Feedback | None: ...

    async def aclose(self) -> None: ...


class Database(Protocol):
    """The two calls the feedback queries need, run in a worker thread (``?`` placeholders)."""

    def one(self, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None: ...

    def execute(self, sql: str, params: tuple[Any, ...]) -> None: ...

    def close(self) -> None: ...


class SqlFeedbackStore:
    """The ``FeedbackStore`` queries over a ``Database`` (SQLite here, PostgreSQL in
    ``store_pg.py``): both have the same tables and run the same SQL."""

    def __init__(
        self,
        db: Database,
        *,
        flush_requests: Callable[[], object] | None,
        other_writers_s: float = 0.0,
    ) -> None:
        """``flush_requests`` moves journaled request-log rows into the database (the log's
        ``flush``); it is called when a request id is not in the table yet.  If it is still
        missing, other processes may not have flushed it yet: look again for up to
        ``other_writers_s`` (0 when this process is the only writer)."""
        self._db = db
        self._flush_requests = flush_requests
        self._other_writers_s = other_writers_s

    async def find_request(self, request_id: str) -> RequestRef | None:
        return await asyncio.to_thread(self._find_request, request_id)

    async def save(self, tenant: str, entry: FeedbackInput, now: float) -> Feedback:
        return await asyncio.to_thread(self._save, tenant, entry, now)

    async def get(self, request_id: str) -> Feedback | None:
        return await asyncio.to_thread(self._get, request_id)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._db.close)

    # -- in a worker thread ------------------------------------------------------------------
    def _find_request(self, request_id: str) -> RequestRef | None:
        row = self._db.one(_REQUEST_SQL, (request_id,))
        if row is None and self._flush_requests is not None:
            self._flush_requests()
            row = self._db.one(_REQUEST_SQL, (request_id,))
        deadline = time.monotonic() + self._other_writers_s
        while row is None and time.monotonic() < deadline:
            time.sleep(_LOOK_AGAIN_S)  # a worker thread: the event loop is not held
            row = self._db.one(_REQUEST_SQL, (request_id,))
        if row is None:
            return None
        rid, tenant, model, lane, channel, rule, cache, status = row
        return RequestRef(rid, tenant, model, lane, channel, rule, cache, int(status))

    def _save(self, tenant: str, entry: FeedbackInput, now: float) -> Feedback:
        reason = entry.reason.value if entry.reason else None
        params = (entry.request_id, tenant, entry.rating.value, reason, entry.comment, now, now)
        self._db.execute(_UPSERT_SQL, params)
        saved = self._get(entry.request_id)
        if saved is None:  # pragma: no cover - the row was written just above
            raise RuntimeError(f"feedback for {entry.request_id} vanished after its write")
        return saved

    def _get(self, request_id: str) -> Feedback | None:
        row = self._db.one(_GET_SQL, (request_id,))
        if row is None:
            return None
        rid, tenant, rating, reason, comment, created_at, updated_at = row
        return Feedback(
            rid, tenant, Rating(rating), Reason(reason) if reason else None, comment,
            created_at, updated_at,
        )  # fmt: skip


class SqliteDatabase:
    """One connection to a records file, used from worker threads in turn; ``schema`` is run
    at open (the feedback table by default; learning/store.py opens the audits table)."""

    def __init__(self, path: Path, schema: str = _SCHEMA) -> None:
        self._lock = threading.Lock()  # one connection, used from worker threads in turn
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=5)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(schema)

    def one(self, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        with self._lock:
            row: tuple[Any, ...] | None = self._db.execute(sql, params).fetchone()
        return row

    def execute(self, sql: str, params: tuple[Any, ...]) -> None:
        with self._lock:
            self._db.execute(sql, params)

    def close(self) -> None:
        with self._lock:
            self._db.close()


class SqliteFeedbackStore(SqlFeedbackStore):
    """Feedback in the request log's SQLite file."""

    def __init__(self, path: Path, *, flush_requests: Callable[[], object] | None = None) -> None:
        super().__init__(SqliteDatabase(path), flush_requests=flush_requests)
