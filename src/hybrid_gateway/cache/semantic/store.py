"""SQLite persistence for the semantic cache, so a restart keeps what was learned.

Every entry is written behind (one row: its namespace, bucket, question, vector, answer,
usage and times), by a writer thread with its own connection (``store_writer.py``), so no
lookup waits for a commit; a restart reads the rows of the current embedder back, newest use
first, until the cache's bounds are met.  Rows of another embedder version are left on disk but
never loaded: their vectors cannot be compared with the current model's.  The reading
connection is used by the semantic cache's worker thread only.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hybrid_gateway.cache.semantic.store_writer import Op, StoreWriter
from hybrid_gateway.embedding.base import Vector
from hybrid_gateway.types import Usage

_SCHEMA = """
CREATE TABLE IF NOT EXISTS semantic_entries (
    id INTEGER PRIMARY KEY,
    scope TEXT NOT NULL,
    embedder TEXT NOT NULL,
    bucket TEXT NOT NULL,
    question TEXT NOT NULL,
    vector BLOB NOT NULL,
    body BLOB NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    usage_estimated INTEGER NOT NULL,
    created_at REAL NOT NULL,
    last_used REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS semantic_entries_embedder ON semantic_entries (embedder, last_used);
CREATE TABLE IF NOT EXISTS semantic_ids (next INTEGER NOT NULL);
"""


@dataclass(frozen=True, slots=True)
class StoredEntry:
    id: int
    scope: str
    embedder: str
    bucket: str
    question: str
    vector: Vector
    body: bytes
    usage: Usage
    created_at: float
    last_used: float


class SqliteEntryStore:
    def __init__(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        # changes go through a writer of their own (store_writer.py); this connection reads
        # and reserves ids, from the semantic cache's worker thread
        self._writer = StoreWriter(path)

    def load(self, embedder: str) -> Iterator[StoredEntry]:
        """The current embedder's rows, most recently used first."""
        self._writer.flush()
        rows = self._db.execute(
            "SELECT id, scope, embedder, bucket, question, vector, body, prompt_tokens, "
            "completion_tokens, usage_estimated, created_at, last_used FROM semantic_entries "
            "WHERE embedder = ? ORDER BY last_used DESC",
            (embedder,),
        )
        for row in rows:
            yield StoredEntry(
                id=row[0], scope=row[1], embedder=row[2], bucket=row[3], question=row[4],
                vector=np.frombuffer(row[5], dtype=np.float32).copy(), body=bytes(row[6]),
                usage=Usage(row[7], row[8], bool(row[9])), created_at=row[10], last_used=row[11],
            )  # fmt: skip

    def max_id(self) -> int:
        row = self._db.execute("SELECT COALESCE(MAX(id), 0) FROM semantic_entries").fetchone()
        return int(row[0])

    def reserve_ids(self, count: int) -> int:
        """The first of ``count`` entry ids no other process on this file gets (``serve
        --workers`` share it; each cache used to count from the file's largest id at its start,
        so two workers gave one id to two entries and overwrote each other's rows)."""
        db = self._db
        if db.in_transaction:
            db.commit()
        db.execute("BEGIN IMMEDIATE")  # one reservation at a time, across processes
        try:
            row = db.execute("SELECT next FROM semantic_ids").fetchone()
            # rows written before the counter existed (or by a version without it) come first
            start = max(int(row[0]) if row else 1, self.max_id() + 1)
            if row is None:
                db.execute("INSERT INTO semantic_ids VALUES (?)", (start + count,))
            else:
                db.execute("UPDATE semantic_ids SET next = ?", (start + count,))
            db.commit()
        except BaseException:
            db.rollback()
            raise
        return start

    def put(self, entry: StoredEntry) -> None:
        self._writer.submit(Op(
            "INSERT OR REPLACE INTO semantic_entries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                entry.id, entry.scope, entry.embedder, entry.bucket, entry.question,
                entry.vector.astype(np.float32).tobytes(), entry.body, entry.usage.prompt_tokens,
                entry.usage.completion_tokens, int(entry.usage.estimated), entry.created_at,
                entry.last_used,
            ),
            droppable=True,
        ))  # fmt: skip

    def touch(self, entry_id: int, last_used: float) -> None:
        self._writer.submit(Op(
            "UPDATE semantic_entries SET last_used = ? WHERE id = ?", (last_used, entry_id),
            droppable=True,
        ))  # fmt: skip

    def replace_body(self, entry_id: int, body: bytes) -> None:
        self._writer.submit(
            Op("UPDATE semantic_entries SET body = ? WHERE id = ?", (body, entry_id))
        )

    def delete(self, ids: list[int]) -> None:
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            self._writer.submit(Op(
                f"DELETE FROM semantic_entries WHERE id IN ({','.join('?' * len(chunk))})", chunk
            ))  # fmt: skip

    def delete_scope(self, scope: str) -> None:
        """Every row of a tenant scope, whatever embedder wrote it."""
        self._writer.submit(Op("DELETE FROM semantic_entries WHERE scope = ?", (scope,)))

    def flush(self) -> None:
        """Wait until every change handed over so far is in the file."""
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()  # what waits is written first
        self._db.close()
