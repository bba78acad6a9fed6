"""The request log in SQLite (WAL): the embedded default, one file next to the gateway.

The journal-first design (a record is journaled before its response is finished, a background
thread moves batches into the database) is shared with the PostgreSQL log and lives in
``journaled_log.py``; this module is the SQLite end of it.

Rows go in as multi-row ``INSERT OR IGNORE ... VALUES (...), (...)`` statements: SQLite releases
the GIL once per statement, not once per row as ``executemany`` does, so the flusher does not
wrestle the event loop for the GIL row by row (measured here: 4.0 us of CPU per row, against 5.1
for ``executemany`` and 11.8 for one ``json_each`` statement per batch).

A ``None`` is never bound as such: ``sqlite3`` binds it through its adapter lookup (a key tuple,
a dict miss, two attribute lookups), about 0.6 us a value against 0.08 for an int, and a
pass-through row holds a dozen of them.  Each ``None`` goes in as ``_NULL`` (the smallest
64-bit integer, which no column ever holds) and every placeholder is ``NULLIF(?, _NULL)``, so
SQLite stores NULL, in its own code with the GIL released.  Measured in process on 33-column
rows: 12.5 -> 6.3 us a row with half the values ``None``, 22.5 -> 7.0 with all of them; on
request-log rows 18.0 -> 8.8 us.  The ``NULLIF`` statements compile larger, so a statement holds
at most 128 rows (it held 500): its eight sizes of statement take about the memory the 500-row
ones of plain ``?`` took (RSS 44-55 against 42-54 MiB in the probe), and 64 rows a statement
measured no cheaper.
"""

from __future__ import annotations

import functools
import itertools
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from hybrid_gateway.feedback.store import FeedbackStore, SqliteFeedbackStore
from hybrid_gateway.observability.journaled_log import EXPIRY_INTERVAL_S, JournaledLog, LogSettings
from hybrid_gateway.observability.log_rows import COLUMNS, Row, record_row
from hybrid_gateway.observability.prompts import PromptMode

__all__ = ["COLUMNS", "EXPIRY_INTERVAL_S", "SqliteRequestLog", "SqliteSink", "record_row"]

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS requests (
    {", ".join(c + (" TEXT PRIMARY KEY" if c == "request_id" else "") for c in COLUMNS)}
);
CREATE INDEX IF NOT EXISTS requests_ts ON requests (ts);
"""

# see the module's docstring (x 33 columns: far under SQLite's 32,766 bound variables)
_ROWS_PER_STATEMENT = 128
# Stands for None in the bound values (see the module's docstring); stored as NULL.  No column
# holds it: they are ids, names, timestamps, counts, costs and durations.
_NULL = -(1 << 63)
_ONE_ROW = "(" + ", ".join(f"NULLIF(?, {_NULL})" for _ in COLUMNS) + ")"


@functools.lru_cache(maxsize=16)
def _insert_sql(rows: int) -> str:
    values = ", ".join([_ONE_ROW] * rows)
    return f"INSERT OR IGNORE INTO requests ({', '.join(COLUMNS)}) VALUES {values}"


class SqliteSink:
    """The ``requests`` table of one SQLite file (a ``RecordSink``)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        _add_new_columns(self._db)

    def insert(self, rows: Sequence[Row]) -> None:
        if not rows:
            return
        self._db.execute("BEGIN")
        start = 0
        for size in _statement_sizes(len(rows)):
            chunk = rows[start : start + size]
            values = itertools.chain.from_iterable(chunk)
            self._db.execute(_insert_sql(size), [_NULL if v is None else v for v in values])
            start += size
        self._db.execute("COMMIT")

    def delete_before(self, ts: float) -> int:
        return self._db.execute("DELETE FROM requests WHERE ts < ?", (ts,)).rowcount

    def query(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return list(self._db.execute(sql, params))

    def close(self) -> None:
        self._db.close()


class SqliteRequestLog(JournaledLog):
    """Journal-then-SQLite request log; journals sit next to the file."""

    def __init__(
        self,
        path: Path,
        *,
        flush_interval_s: float = 0.2,
        retention_days: float | None = None,
        prompts: PromptMode = "none",
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        settings = LogSettings(flush_interval_s, retention_days, prompts, wall)
        super().__init__(SqliteSink(path), path, settings)

    def open_feedback(self) -> FeedbackStore:
        """Feedback lives in the same file, so it joins its request in one query."""
        return SqliteFeedbackStore(self.path, flush_requests=self.flush)

    def status(self) -> dict[str, object]:
        return {"backend": "sqlite", "up": True}


def _statement_sizes(rows: int) -> Iterable[int]:
    """Split ``rows`` into full statements plus power-of-two remainders.

    SQLite connections cache prepared statements by SQL text, and a 500-row statement is large:
    letting every batch size make its own statement grew the gateway's memory without bound.
    With these sizes there are at most ten distinct statements.
    """
    full, rest = divmod(rows, _ROWS_PER_STATEMENT)
    yield from [_ROWS_PER_STATEMENT] * full
    bit = 1 << max(rest.bit_length() - 1, 0)
    while rest:
        if rest & bit:
            yield bit
            rest -= bit
        bit >>= 1


def _add_new_columns(db: sqlite3.Connection) -> None:
    """Add the columns a log file made by an older version lacks (``COLUMNS`` only grows)."""
    have = {row[1] for row in db.execute("PRAGMA table_info(requests)")}
    for column in COLUMNS:
        if column not in have:
            db.execute(f"ALTER TABLE requests ADD COLUMN {column}")
