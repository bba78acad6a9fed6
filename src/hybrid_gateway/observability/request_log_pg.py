"""The request log in a shared PostgreSQL (``stores.records: postgres``).

Every replica journals its records on its own disk (``server.request_log.path`` names the
journal files) and its flusher thread moves them into one ``requests`` table, so a report, a
budget rebuild or a feedback lookup sees the traffic of all replicas.  While PostgreSQL is
unreachable the rows stay in the local journal and go in when it returns (``journaled_log.py``);
nothing acknowledged is lost.

A batch goes in as ``COPY`` into a temporary table, then one ``INSERT ... SELECT ... ON CONFLICT
(request_id) DO NOTHING`` (a replayed journal is harmless).  Measured per row on the 2-core
development machine, batches of 200 (client CPU + PostgreSQL CPU): COPY 5.8 + 12.6 us,
``executemany`` (pipelined) 12.8 + 15.7 us, one multi-row ``INSERT ... VALUES`` per 500 rows
62.7 + 13.1 us (psycopg's own work on the long statement).  For batches of 20 COPY's two extra
statements cost more than they save (26.5 + 46.5 us against 24.6 + 30.5), but small batches
mean little traffic; the per-row cost matters when the batches are large.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hybrid_gateway.feedback.store import FeedbackStore
from hybrid_gateway.observability.journaled_log import JournaledLog, LogSettings
from hybrid_gateway.observability.log_rows import COLUMNS, Row
from hybrid_gateway.observability.prompts import PromptMode
from hybrid_gateway.observability.schema_pg import ensure_records_schema
from hybrid_gateway.stores.postgres import Connection, PostgresPool, pyformat

__all__ = ["PostgresRequestLog", "PostgresSink"]

_COLUMN_LIST = ", ".join(COLUMNS)
_INCOMING = "CREATE TEMP TABLE IF NOT EXISTS incoming (LIKE requests) ON COMMIT DELETE ROWS"
_MERGE = (
    f"INSERT INTO requests ({_COLUMN_LIST}) SELECT {_COLUMN_LIST} FROM incoming "
    "ON CONFLICT (request_id) DO NOTHING"
)


class PostgresSink:
    """The shared ``requests`` table (a ``RecordSink``); every call goes through the pool."""

    def __init__(self, pool: PostgresPool) -> None:
        self._pool = pool
        self._ready = False

    def insert(self, rows: Sequence[Row]) -> None:
        if rows:
            self._pool.run("insert", lambda conn: self._insert(conn, rows))

    def delete_before(self, ts: float) -> int:
        def delete(conn: Connection) -> int:
            self._prepare(conn)
            return conn.execute("DELETE FROM requests WHERE ts < %s", (ts,)).rowcount

        return self._pool.run("expire", delete)

    def query(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        def read(conn: Connection) -> list[tuple[Any, ...]]:
            self._prepare(conn)
            return conn.execute(pyformat(sql), tuple(params)).fetchall()

        return self._pool.run("query", read)

    def close(self) -> None:
        self._pool.close()

    def _prepare(self, conn: Connection) -> None:
        if not self._ready:
            ensure_records_schema(conn)
            self._ready = True

    def _insert(self, conn: Connection, rows: Sequence[Row]) -> None:
        self._prepare(conn)
        with conn.transaction(), conn.cursor() as cursor:
            cursor.execute(_INCOMING)
            with cursor.copy(f"COPY incoming ({_COLUMN_LIST}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            cursor.execute(_MERGE)


class PostgresRequestLog(JournaledLog):
    """Journal on this replica's disk, rows in the shared PostgreSQL."""

    def __init__(
        self,
        journal_path: Path,
        pool: PostgresPool,
        *,
        flush_interval_s: float = 0.2,
        retention_days: float | None = None,
        prompts: PromptMode = "none",
        wall: Callable[[], float] = time.time,
        other_writers_s: float | None = None,
    ) -> None:
        """``other_writers_s``: how long a feedback lookup waits for another replica to flush
        the request it rates.  By default two flush intervals plus 0.25 s (the replicas share
        one config, so they flush as often as this one), at most 2 s."""
        self.path = journal_path
        self.pool = pool
        if other_writers_s is None:
            other_writers_s = min(2 * flush_interval_s + 0.25, 2.0)
        self._other_writers_s = other_writers_s
        settings = LogSettings(flush_interval_s, retention_days, prompts, wall)
        super().__init__(PostgresSink(pool), journal_path, settings)

    def open_feedback(self) -> FeedbackStore:
        from hybrid_gateway.feedback.store_pg import PostgresFeedbackStore

        return PostgresFeedbackStore(
            self.pool, flush_requests=self.flush, retry_after_s=self.pool.health.retry_s,
            other_writers_s=self._other_writers_s,
        )  # fmt: skip

    def status(self) -> dict[str, object]:
        return {"backend": "postgres", **self.pool.health.status(),
                "journal_files_buffered": self.backlog_files}  # fmt: skip
