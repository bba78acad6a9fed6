"""Journal first, database second: what the SQLite and the PostgreSQL request logs share.

Durability without a database write per request: each record is appended to a memory-mapped
journal (``journal.py``) before the response is finished, so it survives a crash of the gateway
process, and kept in memory.  A background thread moves the rows into the database (a
``RecordSink``) in batches: it swaps the in-memory batch and the journal segment together,
inserts the batch (idempotent by request id, so a replay is harmless) and deletes the sealed
journal files only after the commit.  A clean shutdown flushes everything.

When the sink cannot be reached (``StoreUnavailable``: PostgreSQL down), nothing is lost: the
sealed journal files of the failed batch become the *backlog*, the in-memory copies of newer
rows are dropped (the journal holds them), and each flush tick tries the backlog again, oldest
file first (the sink's health gate makes a try while down cost nothing).  Once the backlog is
in, what was journaled meanwhile is sealed and inserted the same way, from disk, and the log
returns to inserting from memory.  Journals left by a process that died are the first backlog
at start-up.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from hybrid_gateway.observability.journal import MmapJournal, journal_lines, leftover_journals
from hybrid_gateway.observability.log_rows import Row, read_rows, record_row
from hybrid_gateway.observability.prompts import PromptMode, note_prompt
from hybrid_gateway.stores.base import StoreUnavailable
from hybrid_gateway.types import RequestRecord

if TYPE_CHECKING:
    from hybrid_gateway.feedback.store import FeedbackStore

__all__ = ["EXPIRY_INTERVAL_S", "JournaledLog", "LogSettings", "RecordSink", "RequestLog"]

_log = logging.getLogger(__name__)

# How often the flusher deletes the rows past server.request_log.retention_days.
EXPIRY_INTERVAL_S = 3600.0

Query = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]


class RecordSink(Protocol):
    """Where a journaled log's rows end up.  Every method runs in one thread at a time."""

    def insert(self, rows: Sequence[Row]) -> None:
        """Insert in one transaction, skipping request ids already there; raise
        ``StoreUnavailable`` when the database cannot be reached."""
        ...

    def delete_before(self, ts: float) -> int: ...

    def query(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Run a read with ``?`` placeholders (the sink translates them if it must)."""
        ...

    def close(self) -> None: ...


class RequestLog(Protocol):
    """What the runtime, tenancy and the feedback API use of a request log."""

    prompts: PromptMode

    def note_prompt(self, messages: Sequence[Mapping[str, Any]], record: RequestRecord) -> None: ...

    def write(self, record: RequestRecord) -> None: ...

    def flush(self) -> int: ...

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def open_feedback(self) -> FeedbackStore: ...

    def status(self) -> dict[str, object]: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class LogSettings:
    flush_interval_s: float = 0.2
    retention_days: float | None = None
    prompts: PromptMode = "none"
    wall: Callable[[], float] = time.time


class JournaledLog:
    """``write`` is cheap and safe to call on the event loop; the rest runs in the flusher."""

    def __init__(self, sink: RecordSink, journal_path: Path, settings: LogSettings) -> None:
        self._sink = sink
        self._folder, self._stem = journal_path.parent, journal_path.name
        self.flush_interval_s = settings.flush_interval_s
        days = settings.retention_days
        # Rows are stamped with the wall clock (``RequestRecord.started_at``), so retention is too.
        self._retention_s = days * 86_400 if days is not None else None
        self._wall = settings.wall
        self._last_expiry = float("-inf")
        self.prompts: PromptMode = settings.prompts
        self._lock = threading.Lock()  # guards the journal and the pending rows together
        self._flush_lock = threading.Lock()  # one flush (or sink call) at a time
        self._stop = threading.Event()
        self._pending: list[Row] = []  # journaled, not yet in the database
        self._folder.mkdir(parents=True, exist_ok=True)
        # Journals left by a process that died: inserted before anything else.
        self._backlog: list[Path] = list(leftover_journals(self._folder, self._stem))
        self._journal = MmapJournal(self._folder, self._stem)
        self._insert_backlog()
        self._expire_if_due()  # on start, then about hourly from the flusher thread
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
        """Move everything journaled so far into the database; return the number of rows moved.

        Returns 0 without raising while the database is unreachable (the rows stay on disk).
        """
        with self._flush_lock:
            if self._backlog:
                return self._flush_backlog()
            if not self._pending:
                return 0
            fresh = self._journal.prepare()  # file work outside the lock the writers take
            with self._lock:
                rows, self._pending = self._pending, []
                retired = self._journal.detach(fresh)
            sealed = retired.seal()  # likewise
            try:
                self._sink.insert(rows)
            except StoreUnavailable:
                self._backlog.extend(sealed)
                return 0
            _unlink(sealed)
            return len(rows)

    @property
    def backlog_files(self) -> int:
        """Journal files waiting for the database (0 while it is reachable)."""
        return len(self._backlog)

    def close(self) -> None:
        """Flush what is journaled and close the database (once; later calls do nothing)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=10)
        with self._flush_lock:
            with self._lock:
                rows, self._pending = self._pending, []
                sealed = self._journal.close()
            if self._backlog:
                self._backlog.extend(sealed)
            else:
                try:
                    self._sink.insert(rows)
                    _unlink(sealed)
                except StoreUnavailable:
                    self._backlog.extend(sealed)
            if self._backlog and not self._insert_backlog():
                _log.warning(
                    "request log: %d journal file(s) stay in %s for the next start (%s)",
                    len(self._backlog), self._folder, "database unreachable",
                )  # fmt: skip
            self._sink.close()

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Read-only access for reports, budgets and tests (after ``flush``).  ``?`` placeholders.

        Raises ``StoreUnavailable`` while the database cannot be reached.
        """
        with self._flush_lock:
            return self._sink.query(sql, params)

    def expire(self) -> int:
        """Delete the rows older than the retention period; return how many went."""
        if self._retention_s is None:
            return 0
        with self._flush_lock:
            now = self._wall()
            deleted = self._sink.delete_before(now - self._retention_s)
            self._last_expiry = now
            return deleted

    def _expire_if_due(self) -> None:
        if self._retention_s is not None and self._wall() - self._last_expiry >= EXPIRY_INTERVAL_S:
            with contextlib.suppress(StoreUnavailable):  # tried again at the next tick
                self.expire()

    def _run(self) -> None:
        while not self._stop.wait(self.flush_interval_s):
            self.flush()
            self._expire_if_due()

    def _flush_backlog(self) -> int:
        moved = self._insert_backlog()
        if moved is None:
            with self._lock:
                self._pending.clear()  # the journal holds these rows; they go in from disk
            return 0
        # The backlog is in: what was journaled meanwhile follows it, from disk too.
        fresh = self._journal.prepare()
        with self._lock:
            self._pending.clear()
            retired = self._journal.detach(fresh)
        self._backlog.extend(retired.seal())
        return moved + (self._insert_backlog() or 0)

    def _insert_backlog(self) -> int | None:
        """Insert the backlog files, oldest first; the row count, or None if the sink is down."""
        moved = 0
        while self._backlog:
            path = self._backlog[0]
            try:
                rows = list(read_rows(journal_lines(path)))
            except FileNotFoundError:  # another process replayed it as a leftover meanwhile
                rows = []
            try:
                if rows:
                    self._sink.insert(rows)
            except StoreUnavailable:
                return None
            path.unlink(missing_ok=True)
            self._backlog.pop(0)
            moved += len(rows)
        return moved


def _unlink(paths: Sequence[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)
