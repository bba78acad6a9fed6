"""Feedback in the shared PostgreSQL (``stores.records: postgres``): the same ``feedback``
table, ``rated_requests`` view and queries as the SQLite store, next to the shared
``requests`` table, so feedback posted through one replica for a request another replica
answered finds it.

While PostgreSQL is unreachable a feedback call answers 503 (``store_unavailable``) with a
``Retry-After`` of ``stores.retry_s``; the client may send it again (saving is idempotent).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from hybrid_gateway.errors import Overloaded
from hybrid_gateway.feedback.store import SqlFeedbackStore
from hybrid_gateway.observability.schema_pg import ensure_records_schema
from hybrid_gateway.stores.base import StoreUnavailable
from hybrid_gateway.stores.postgres import Connection, PostgresPool, pyformat

__all__ = ["PostgresFeedbackStore"]

T = TypeVar("T")


class _PostgresDatabase:
    def __init__(self, pool: PostgresPool, retry_after_s: float) -> None:
        self._pool = pool
        self._retry_after_s = retry_after_s
        self._ready = False

    def one(self, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        def read(conn: Connection) -> tuple[Any, ...] | None:
            self._prepare(conn)
            return conn.execute(pyformat(sql), params).fetchone()

        return self._run(read)

    def execute(self, sql: str, params: tuple[Any, ...]) -> None:
        def write(conn: Connection) -> None:
            self._prepare(conn)
            conn.execute(pyformat(sql), params)

        self._run(write)

    def close(self) -> None:
        """The pool belongs to the request log, which closes it."""

    def _run(self, work: Callable[[Connection], T]) -> T:
        try:
            return self._pool.run("feedback", work)
        except StoreUnavailable as exc:
            raise Overloaded(
                "The records store (PostgreSQL) is unreachable; send the feedback again later.",
                retry_after_s=self._retry_after_s, code="store_unavailable",
            ) from exc  # fmt: skip

    def _prepare(self, conn: Connection) -> None:
        if not self._ready:
            ensure_records_schema(conn)
            self._ready = True


class PostgresFeedbackStore(SqlFeedbackStore):
    """Feedback in the PostgreSQL the request log writes to (its pool)."""

    def __init__(
        self,
        pool: PostgresPool,
        *,
        flush_requests: Callable[[], object] | None = None,
        retry_after_s: float = 1.0,
        other_writers_s: float = 0.0,
    ) -> None:
        super().__init__(
            _PostgresDatabase(pool, retry_after_s), flush_requests=flush_requests,
            other_writers_s=other_writers_s,
        )  # fmt: skip
