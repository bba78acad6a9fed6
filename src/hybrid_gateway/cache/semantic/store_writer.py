"""Write-behind for the semantic cache's SQLite file: its own thread and connection.

The semantic cache's one worker thread answers lookups and used to write every stored entry
itself (an ``INSERT`` and a commit per miss, an ``UPDATE`` per hit).  A commit is usually
sub-millisecond, but every ~1,000 pages of WAL it also runs a checkpoint, and with
``serve --workers N`` the workers share the file, so a commit can wait for another worker's
write or checkpoint: the lookups queued behind it waited too.  Here the worker thread only
appends an operation to a list; this writer applies what has gathered, in order, in one
transaction.

Bounded: past ``max_pending`` waiting operations, a new ``put`` or ``touch`` is dropped and
counted (the entry stays in memory; only its row, or its row's last use, is lost for a
restart).  Deletions and corrections are never dropped: a lost one would bring an invalidated
answer back at the next start.  A batch that fails (the file locked past the busy timeout, a
full disk) is tried again after ``retry_wait_s``, at most ``attempts`` times, then dropped
with an ERROR.  Every failure and drop is logged, at most once a minute per kind, and what it
cost is counted in ``failed`` and ``dropped``.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["MAX_PENDING", "Op", "StoreWriter"]

_log = logging.getLogger(__name__)

MAX_PENDING = 16_384  # operations waiting; a put holds an entry's row (~5 KB for long prompts)
_LOG_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class Op:
    sql: str
    params: Sequence[Any]
    droppable: bool = False  # a put or a touch; never a deletion or a correction


class StoreWriter:
    def __init__(
        self,
        path: str | Path,
        *,
        max_pending: int = MAX_PENDING,
        attempts: int = 3,
        retry_wait_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._max_pending = max_pending
        self._attempts = attempts
        self._retry_wait_s = retry_wait_s
        self._clock = clock
        self._cond = threading.Condition()
        self._ops: list[Op] = []
        self._submitted = 0
        self._settled = 0  # applied or given up
        self._closing = False
        self.dropped = 0  # puts and touches refused while full
        self.failed = 0  # operations given up after their attempts
        self._last_log: dict[str, float] = {}
        self._thread = threading.Thread(target=self._run, name="semantic-store", daemon=True)
        self._thread.start()

    def submit(self, op: Op) -> None:
        with self._cond:
            if self._closing:
                raise RuntimeError("the semantic store is closed")
            if op.droppable and len(self._ops) >= self._max_pending:
                self.dropped += 1
                self._warn("full", "semantic cache store: %d writes waiting, row dropped "
                           "(%d so far)", len(self._ops), self.dropped)  # fmt: skip
                return
            self._ops.append(op)
            self._submitted += 1
            self._cond.notify_all()

    @property
    def pending(self) -> int:
        with self._cond:
            return self._submitted - self._settled

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until what was submitted so far is applied (or given up); False on timeout."""
        with self._cond:
            target = self._submitted
            return self._cond.wait_for(lambda: self._settled >= target, timeout_s)

    def close(self) -> None:
        """Apply what waits, stop the thread and close the connection (once)."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        self._db.close()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._ops) or self._closing)
                if not self._ops:
                    return  # closing, and nothing left
                ops, self._ops = self._ops, []
            self._apply(ops)
            with self._cond:
                self._settled += len(ops)
                self._cond.notify_all()

    def _apply(self, ops: list[Op]) -> None:
        for attempt in range(1, self._attempts + 1):
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    for op in ops:
                        self._db.execute(op.sql, op.params)
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                return
            except sqlite3.Error as exc:
                if attempt == self._attempts:
                    self.failed += len(ops)
                    _log.error("semantic cache store: %d writes given up after %d attempts: %s",
                               len(ops), attempt, exc)  # fmt: skip
                    return
                self._warn("retry", "semantic cache store: a write failed (%s), trying again",
                           exc)  # fmt: skip
                with self._cond:  # a close does not cut the wait short: the batch still matters
                    self._cond.wait(self._retry_wait_s)

    def _warn(self, kind: str, message: str, *args: object) -> None:
        now = self._clock()
        if now - self._last_log.get(kind, float("-inf")) >= _LOG_EVERY_S:
            self._last_log[kind] = now
            _log.warning(message, *args)
