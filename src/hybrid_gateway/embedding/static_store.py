"""The static embedder's token vectors kept in a SQLite file (``embedding.static.table_path``).

A token vector costs a small forward pass the first time a process meets the token (5-20 ms
of CPU here), and the in-memory table (``static.py``) starts empty at every start and in every
``serve --workers`` process: after a restart, or in a second worker, the first long prompts
cost as much as e5 does.  With a file, a process reads the vectors that any process computed
before (one ``SELECT`` for the unseen tokens of a call) and computes only the rest, which it
adds for the others.

* Rows are keyed by the static embedder's version and the token id, so a new version never
  reads an old vector; a row of the wrong length is ignored.
* Writes leave the request path: ``put`` hands the rows to a writer thread with its own
  connection (WAL mode: reads never wait for it, nor for its checkpoints), which writes them
  in batches; past ``MAX_PENDING`` waiting rows new ones are dropped (counted).  A write that
  meets another process's lock waits at most ``BUSY_MS`` and is otherwise skipped (another
  process, or a later call, writes those rows).
* At most ``max_rows`` rows per version (1.5 KiB each with e5-small's 384 dimensions); past
  that, new tokens stay in memory only.
* A file that cannot be opened, read or written costs the speed-up, never a request: one
  WARNING says why, and the embedder carries on with its in-memory table (the next failure
  is logged again only after ``LOG_EVERY_S``).  A ``listener`` (the gateway's metrics) hears
  it as ``hybrid_gateway_store_up{store="static_tokens"}`` 0 and
  ``..._store_errors_total{store="static_tokens",op=open|get|put}``; 1 again at the next
  success.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from hybrid_gateway.stores.health import StoreListener

__all__ = ["MAX_PENDING", "MAX_ROWS", "TokenStore"]

F32 = npt.NDArray[np.float32]
MAX_ROWS = 131_072  # per version: 192 MiB of 384-d vectors; a busy gateway sees far fewer
MAX_PENDING = 16_384  # rows waiting for the writer (24 MiB)
BUSY_MS = 50
OPEN_WAIT_S = 5.0  # at start: another process creating the file and its table
LOG_EVERY_S = 60.0
_CHUNK = 500  # ids per SELECT (SQLite's bound on parameters is 32,766 here; stay well under)
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS static_tokens (version TEXT NOT NULL, token INTEGER NOT NULL, "
    "vector BLOB NOT NULL, PRIMARY KEY (version, token)) WITHOUT ROWID"
)

log = logging.getLogger("hybrid_gateway.embedding")
_FAILED = {"open": "cannot be opened", "get": "cannot be read", "put": "cannot be written"}


class TokenStore:
    """Token vectors of one static embedder version in a SQLite file, shared by processes.

    ``get`` and ``put`` are called by one thread at a time (the static embedder's lock); the
    writer thread has a connection of its own.
    """

    def __init__(
        self,
        path: str | Path,
        version: str,
        dim: int,
        *,
        max_rows: int = MAX_ROWS,
        clock: Callable[[], float] = time.monotonic,
        listener: StoreListener | None = None,
    ) -> None:
        self.path = Path(path)
        self._listener = listener
        self._up = False
        self._version, self._bytes = version, dim * 4
        self._max_rows = max_rows
        self._clock = clock
        self._logged_at = float("-inf")
        self._rows = 0
        self.loaded = 0  # vectors read from the file
        self.written = 0  # vectors added to it
        self.failures = 0
        self.dropped = 0  # rows not written: the writer was MAX_PENDING rows behind
        self._db: sqlite3.Connection | None = None  # reads (the embedder's thread)
        self._writer_db: sqlite3.Connection | None = None  # writes (the writer thread)
        self._pending: list[tuple[str, int, bytes]] = []
        self._lock = threading.Lock()  # the pending rows (held for a swap, never for a write)
        self._write_lock = threading.Lock()  # the writer's connection
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        db = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # processes starting together wait for each other's schema, up to OPEN_WAIT_S
            db = self._connect(OPEN_WAIT_S)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)
            (self._rows,) = db.execute(
                "SELECT COUNT(*) FROM static_tokens WHERE version = ?", (version,)
            ).fetchone()
            db.commit()
            db.execute(f"PRAGMA busy_timeout={BUSY_MS}")
            self._writer_db = self._connect(BUSY_MS / 1000)
        except (OSError, sqlite3.Error) as exc:
            if db is not None:
                db.close()
            self._failed("open", exc)
            return
        self._db = db
        self._answered()

    def _connect(self, timeout_s: float) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path), timeout=timeout_s, check_same_thread=False)
        db.execute("PRAGMA synchronous=NORMAL")  # a cache: a lost last write is recomputed
        return db

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
            self._failed("get", exc)
            return {}
        self._answered()
        self.loaded += len(found)
        return found

    def put(self, tokens: Sequence[int], vectors: F32) -> None:
        """Hand ``vectors`` (one row per token) to the writer; they are added unless the file
        holds ``max_rows`` already."""
        if self._db is None or not tokens:
            return
        rows = [
            (self._version, int(token), np.ascontiguousarray(vector, np.float32).tobytes())
            for token, vector in zip(tokens, vectors, strict=True)
        ]
        with self._lock:
            room = MAX_PENDING - len(self._pending)
            self.dropped += max(len(rows) - room, 0)
            self._pending += rows[: max(room, 0)]
            if self._thread is None and not self._stop:
                self._thread = threading.Thread(
                    target=self._run, name="static-token-writer", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def flush(self) -> None:
        """Write the rows waiting for the writer now (tests, ``close``)."""
        with self._write_lock:
            with self._lock:
                rows, self._pending = self._pending, []
            self._write(rows)

    def _run(self) -> None:
        while not self._stop:
            self._wake.wait()  # set by put (rows to write) and by close
            self._wake.clear()
            self.flush()  # takes every row appended before the clear

    def _write(self, rows: list[tuple[str, int, bytes]]) -> None:  # under self._write_lock
        db = self._writer_db
        room = self._max_rows - self._rows
        if db is None or not rows or room <= 0:
            return
        try:
            with db:
                added = db.executemany(
                    "INSERT OR IGNORE INTO static_tokens VALUES (?, ?, ?)", rows[:room]
                ).rowcount
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                return  # another worker is writing: these rows come another time
            self._failed("put", exc)
            return
        except sqlite3.Error as exc:
            self._failed("put", exc)
            return
        self._answered()
        added = max(added, 0)
        self._rows += added
        self.written += added

    def close(self) -> None:
        """Write what waits, stop the writer, close both connections (later calls: no-ops)."""
        self._stop = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self.flush()
        with self._write_lock:
            for db in (self._db, self._writer_db):
                if db is not None:
                    db.close()
            self._db = self._writer_db = None

    def _answered(self) -> None:
        if not self._up:
            self._up = True
            if self._listener is not None:
                self._listener.store_state(True)

    def _failed(self, op: str, exc: BaseException) -> None:
        self.failures += 1
        if self._listener is not None:
            self._listener.store_error(op)
            if self._up or op == "open":
                self._listener.store_state(False)
        self._up = False
        what = _FAILED[op]
        now = self._clock()
        if now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            log.warning(
                "static token file %s %s (%s): token vectors are computed in memory only",
                self.path, what, exc,
            )  # fmt: skip
