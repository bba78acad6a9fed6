"""The request log: one row per request, in SQLite (WAL), without slowing the request path.

Durability without a database write per request: each record is appended to a memory-mapped
journal (``journal.py``) before the response is finished, so it survives a crash of the gateway
process, and kept in memory.  A background thread moves the rows into SQLite in batches: it
swaps the in-memory batch and the journal segment together, inserts the batch (``INSERT OR
IGNORE`` by request id, so a replay is harmless) and deletes the sealed journal files only after
the commit.  Journals are read back only at start-up, to replay what a process that died had
journaled but not yet inserted.  A clean shutdown flushes everything.

Rows go in as multi-row ``INSERT ... VALUES (...), (...)`` statements: SQLite releases the GIL
once per statement, not once per row as ``executemany`` does, so the flusher does not wrestle
the event loop for the GIL row by row (measured here: 4.0 us of CPU per row, against 5.1 for
``executemany`` and 11.8 for one ``json_each`` statement per batch).
"""

from __future__ import annotations

import functools
import itertools
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from hybrid_gateway.observability.journal import MmapJournal, journal_lines, leftover_journals
from hybrid_gateway.observability.prompts import PROMPT_KEY, PromptMode, note_prompt
from hybrid_gateway.types import TIER_FALLBACK, RequestRecord

COLUMNS: tuple[str, ...] = (
    "request_id", "ts", "tenant", "model", "stream", "lane", "channel", "rule", "score",
    "cache", "similarity", "status", "error_code", "prompt_tokens", "completion_tokens",
    "usage_estimated", "cost_usd", "latency_ms", "upstream_ms", "ttft_ms", "retries",
    "fallback", "cache_key", "app", "saved_usd", "queue_ms", "prompt",
)  # fmt: skip

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS requests (
    {", ".join(c + (" TEXT PRIMARY KEY" if c == "request_id" else "") for c in COLUMNS)}
);
CREATE INDEX IF NOT EXISTS requests_ts ON requests (ts);
"""


Row = tuple[Any, ...]

# How often the flusher deletes the rows past server.request_log.retention_days.
EXPIRY_INTERVAL_S = 3600.0
_ROWS_PER_STATEMENT = 500  # x 27 columns stays under SQLite's 32,766 bound variables
_ONE_ROW = "(" + ", ".join("?" for _ in COLUMNS) + ")"


@functools.lru_cache(maxsize=16)
def _insert_sql(rows: int) -> str:
    values = ", ".join([_ONE_ROW] * rows)
    return f"INSERT OR IGNORE INTO requests ({', '.join(COLUMNS)}) VALUES {values}"


def record_row(record: RequestRecord) -> Row:
    """The record's values in ``COLUMNS`` order."""
    route = record.route
    usage = record.usage
    return (
        record.request_id,
        record.started_at,
        record.tenant,
        record.model,
        int(record.stream),
        route.lane if route else None,
        route.channel if route else None,
        route.rule if route else None,
        route.score if route else None,
        record.cache.value,
        record.similarity,
        record.status,
        record.error_code,
        usage.prompt_tokens if usage else None,
        usage.completion_tokens if usage else None,
        int(usage.estimated) if usage else None,
        record.cost_usd,
        round(record.latency_ms, 3),
        record.upstream_ms,
        record.ttft_ms,
        record.retries,
        record.fallback or record.extra.get(TIER_FALLBACK),
        record.cache_key,
        record.app,
        _saved_usd(record),
        _queue_ms(record),
        _prompt(record),
    )


def _queue_ms(record: RequestRecord) -> float | None:
    """Time spent waiting for a lane slot (lanes with a queue, ``Dispatcher._slot``)."""
    waited = record.extra.get("queue_ms")
    return round(waited, 3) if isinstance(waited, float) else None


def _prompt(record: RequestRecord) -> str | None:
    """The prompt as ``server.request_log.prompts`` keeps it (``prompts.note_prompt``)."""
    prompt = record.extra.get(PROMPT_KEY)
    return prompt if isinstance(prompt, str) else None


def _saved_usd(record: RequestRecord) -> float | None:
    """What a cache hit would have cost upstream (``Pipeline._note_saving``); None otherwise."""
    saved = record.extra.get("saved_usd")
    return saved if isinstance(saved, float) else None


class SqliteRequestLog:
    """Journal-then-SQLite request log.  ``write`` is cheap and safe to call on the event loop."""

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
        self._flush_interval_s = flush_interval_s
        # Rows are stamped with the wall clock (``RequestRecord.started_at``), so retention is too.
        self._retention_s = retention_days * 86_400 if retention_days is not None else None
        self._wall = wall
        self._last_expiry = float("-inf")
        self.prompts: PromptMode = prompts
        self._lock = threading.Lock()  # guards the journal and the pending rows together
        self._flush_lock = threading.Lock()  # one flush at a time
        self._stop = threading.Event()
        self._pending: list[Row] = []  # journaled, not yet in SQLite
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        _add_new_columns(self._db)
        self._replay_leftovers()
        self._expire_if_due()  # on start, then about hourly from the flusher thread
        self._journal = MmapJournal(path.parent, path.name)
        self._thread = threading.Thread(target=self._run, name="request-log", daemon=True)
        self._thread.start()

    def note_prompt(self, messages: Sequence[Mapping[str, Any]], record: RequestRecord) -> None:
        """Keep the last user message on ``record`` as ``prompts`` says (nothing by default)."""
        if self.prompts != "none":
            note_prompt(self.prompts, messages, record)

    def write(self, record: RequestRecord) -> None:
        row = record_row(record)
        line = orjson.dumps(row)
        with self._lock:
            self._journal.append(line)
            self._pending.append(row)

    def flush(self) -> int:
        """Move everything journaled so far into SQLite; return the number of rows moved."""
        with self._flush_lock:
            if not self._pending:
                return 0
            fresh = self._journal.prepare()  # file work outside the lock the writers take
            with self._lock:
                rows, self._pending = self._pending, []
                sealed = self._journal.swap(fresh)
            self._insert(rows)
            for journal in sealed:
                journal.unlink()
            return len(rows)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        with self._flush_lock, self._lock:
            rows, self._pending = self._pending, []
            sealed = self._journal.close()
            self._insert(rows)
            for journal in sealed:
                journal.unlink()
        self._db.close()

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Read-only access for reports and tests (after ``flush``)."""
        with self._flush_lock:
            return list(self._db.execute(sql, params))

    def expire(self) -> int:
        """Delete the rows older than the retention period; return how many went."""
        if self._retention_s is None:
            return 0
        with self._flush_lock:
            now = self._wall()
            self._last_expiry = now
            cursor = self._db.execute(
                "DELETE FROM requests WHERE ts < ?", (now - self._retention_s,)
            )
            return cursor.rowcount

    def _expire_if_due(self) -> None:
        if self._retention_s is not None and self._wall() - self._last_expiry >= EXPIRY_INTERVAL_S:
            self.expire()

    def _run(self) -> None:
        while not self._stop.wait(self._flush_interval_s):
            self.flush()
            self._expire_if_due()

    def _replay_leftovers(self) -> None:
        for journal in list(leftover_journals(self.path.parent, self.path.name)):
            self._insert(list(_read_rows(journal_lines(journal))))
            journal.unlink()

    def _insert(self, rows: Sequence[Row]) -> None:
        if not rows:
            return
        self._db.execute("BEGIN")
        start = 0
        for size in _statement_sizes(len(rows)):
            chunk = rows[start : start + size]
            self._db.execute(_insert_sql(size), list(itertools.chain.from_iterable(chunk)))
            start += size
        self._db.execute("COMMIT")


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


def _read_rows(lines: Iterable[bytes]) -> Iterable[Row]:
    for line in lines:
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a line torn by a crash mid-write: the request was never acknowledged
        if isinstance(row, list) and 0 < len(row) <= len(COLUMNS):
            # A journal written before columns were added: those columns are NULL.
            yield tuple(row) + (None,) * (len(COLUMNS) - len(row))


def _add_new_columns(db: sqlite3.Connection) -> None:
    """Add the columns a log file made by an older version lacks (``COLUMNS`` only grows)."""
    have = {row[1] for row in db.execute("PRAGMA table_info(requests)")}
    for column in COLUMNS:
        if column not in have:
            db.execute(f"ALTER TABLE requests ADD COLUMN {column}")
