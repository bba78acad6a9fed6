"""Audit verdicts in the shared PostgreSQL (``stores.records: postgres``): the same ``audits``
table and SQL as in SQLite (``store.py``), beside the shared ``requests`` and ``feedback``.

The table is created at first use under an advisory lock (replicas start together), after a
catalogue look that finds it in every later process.  While PostgreSQL is unreachable a verdict
is dropped (an audit is a sample: the next one takes its place) and the pool's health reports
the outage, as for every records call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from hybrid_gateway.learning.store import SqlVerdictStore
from hybrid_gateway.stores.postgres import Connection, PostgresPool, pyformat

__all__ = ["PostgresVerdictStore", "ensure_audits_schema"]

T = TypeVar("T")

_LOCK = "SELECT pg_advisory_xact_lock(hashtext('hybrid_gateway.audits'))"
_EXISTS = "SELECT to_regclass('audits') IS NOT NULL"
_TABLE = """CREATE TABLE IF NOT EXISTS audits (
    request_id TEXT PRIMARY KEY, ts DOUBLE PRECISION NOT NULL, tenant TEXT NOT NULL,
    kind TEXT NOT NULL, judge TEXT NOT NULL, rubric TEXT,
    verdict TEXT CHECK (verdict IN ('equivalent', 'a_worse', 'b_worse')),
    error TEXT, lane_a TEXT, lane_b TEXT, similarity DOUBLE PRECISION, scope TEXT,
    cost_usd DOUBLE PRECISION NOT NULL, prompt TEXT, cached_prompt TEXT
)"""


def ensure_audits_schema(conn: Connection) -> None:
    row = conn.execute(_EXISTS).fetchone()
    if row is not None and row[0]:
        return
    with conn.transaction():
        conn.execute(_LOCK)
        conn.execute(_TABLE)
        conn.execute("CREATE INDEX IF NOT EXISTS audits_ts ON audits (ts)")


class _PostgresAudits:
    def __init__(self, pool: PostgresPool) -> None:
        self._pool = pool
        self._ready = False

    def one(self, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return self._run(lambda conn: conn.execute(pyformat(sql), params).fetchone())

    def execute(self, sql: str, params: tuple[Any, ...]) -> None:
        self._run(lambda conn: conn.execute(pyformat(sql), params))

    def close(self) -> None:
        """The pool belongs to the request log, which closes it."""

    def _run(self, work: Callable[[Connection], T]) -> T:
        def prepared(conn: Connection) -> T:
            if not self._ready:
                ensure_audits_schema(conn)
                self._ready = True
            return work(conn)

        return self._pool.run("audits", prepared)


class PostgresVerdictStore(SqlVerdictStore):
    def __init__(self, pool: PostgresPool) -> None:
        super().__init__(_PostgresAudits(pool))
