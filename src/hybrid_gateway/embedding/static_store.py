"""The static embedder's token vectors kept in a SQLite file (``embedding.static.table_path``).

A token vector costs a small forward pass the first time a process meets the token (5-20 ms
of CPU here), and the in-memory table (``static.py``) starts empty at every start and in every
``serve --workers`` process: after a restart, or in a second worker, the first long prompts
cost as much as e5 does.  With a file, a process reads the vectors that any process computed
before (one ``SELECT`` for the unseen tokens of a call) and computes only the rest, which it
adds for the others.

* Rows are keyed by the static embedder's version and the token id, so a new version never
  reads an old vector; a row of the wrong length is ignored.
* WAL mode: the workers read while one writes; a write that meets a lock waits at most
  ``BUSY_MS`` and is otherwise skipped (another process, or the next call, writes it).
* At most ``max_rows`` rows per version (1.5 KiB each with e5-small's 384 dimensions); past
  that, new tokens stay in memory only.
* A file that cannot be opened, read or written costs the speed-up, never a request: one
  WARNING says why, and the embedder carries on with its in-memory table (the next failure
  is logged again only after ``LOG_EVERY_S``).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = ["MAX_ROWS", "TokenStore"]

F32 = npt.NDArray[np.float32]
MAX_ROWS = 131_072  # per version: 192 MiB of 384-d vectors; a busy gateway sees far fewer
BUSY_MS = 50
LOG_EVERY_S = 60.0
_CHUNK = 500  # ids per SELECT (SQLite's bound on parameters is 32,766 here; stay well under)
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS static_tokens (version TEXT NOT NULL, token INTEGER NOT NULL, "
    "vector BLOB NOT NULL, PRIMARY KEY (version, token)) WITHOUT ROWID"
)

log = logging.getLogger("hybrid_gateway.embedding")


class TokenStore:
    """Token vectors of one static embedder version in a SQLite file, shared by processes.

    Not thread-safe on its own: the static embedder calls it under its lock.
    """

    def __init__(
        self,
        path: str | Path,
        version: str,
        dim: int,
        *,
        max_rows: int = MAX_ROWS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self._version, self._bytes = version, dim * 4
        self._max_rows = max_rows
        self._clock = clock
        self._logged_at = float("-inf")
        self._rows = 0
        self.loaded = 0  # vectors read from the file
        self.written = 0  # vectors added to it
        self.failures = 0
        self._db: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(str(self.path), timeout=BUSY_MS / 1000, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # a cache: a lost last write is recomputed
            db.execute(_SCHEMA)
            (self._rows,) = db.execute(
                "SELECT COUNT(*) FROM static_tokens WHERE version = ?", (version,)
            ).fetchone()
            db.commit()
        except (OSError, sqlite3.Error) as exc:
            self._failed("cannot be opened", exc)
            return
        self._db = db

    @property
    def available(self) -> bool:
        return self._db is not None

    @property
    def rows(self) -> int:
        """Rows of this version in the file, as far as this process knows."""
        return self._rows

    def get(self, tokens: Sequence[int]) -> dict[int, F32]:
        """The stored vectors of ``tokens`` (those found)."""
        db = self._db
        if db is None or not tokens:
            return {}
        found: dict[int, F32] = {}
        try:
            for start in range(0, len(tokens), _CHUNK):
                chunk = tokens[start : start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = db.execute(
                    f"SELECT token, vector FROM static_tokens WHERE version = ? "
                    f"AND token IN ({marks})",
                    (self._version, *chunk),
                )
                for token, blob in rows:
                    if len(blob) == self._bytes:
                        found[int(token)] = np.frombuffer(blob, dtype=np.float32)
        except sqlite3.Error as exc:
            self._failed("cannot be read", exc)
            return {}
        self.loaded += len(found)
        return found

    def put(self, tokens: Sequence[int], vectors: F32) -> None:
        """Add ``vectors`` (one row per token) unless the file holds ``max_rows`` already."""
        db = self._db
        room = self._max_rows - self._rows
        if db is None or not tokens or room <= 0:
            return
        rows = [
            (self._version, int(token), np.ascontiguousarray(vector, np.float32).tobytes())
            for token, vector in zip(tokens[:room], vectors[:room], strict=True)
        ]
        try:
            with db:
                added = db.executemany(
                    "INSERT OR IGNORE INTO static_tokens VALUES (?, ?, ?)", rows
                ).rowcount
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                return  # another worker is writing: these rows come another time
            self._failed("cannot be written", exc)
            return
        except sqlite3.Error as exc:
            self._failed("cannot be written", exc)
            return
        added = max(added, 0)
        self._rows += added
        self.written += added

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _failed(self, what: str, exc: BaseException) -> None:
        self.failures += 1
        now = self._clock()
        if now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            log.warning(
                "static token file %s %s (%s): token vectors are computed in memory only",
                self.path, what, exc,
            )  # fmt: skip
