"""The request log: one row per request, in SQLite (WAL), without slowing the request path.

Durability without a database write per request: each record is appended to a journal file
(one ``os.write`` of a JSON line, no fsync) before the response is finished, so it survives a
crash of the gateway process.  A background thread moves the journal into SQLite in batches:
it rotates the journal file, inserts the rotated batch (``INSERT OR IGNORE`` by request id, so a
replay is harmless) and deletes the rotated file only after the commit.  At start-up, journal
files left by a process that died are replayed first.  A clean shutdown flushes everything.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

from hybrid_gateway.types import RequestRecord

COLUMNS: tuple[str, ...] = (
    "request_id", "ts", "tenant", "model", "stream", "lane", "channel", "rule", "score",
    "cache", "similarity", "status", "error_code", "prompt_tokens", "completion_tokens",
    "usage_estimated", "cost_usd", "latency_ms", "upstream_ms", "ttft_ms", "retries",
    "fallback", "cache_key",
)  # fmt: skip

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS requests (
    {", ".join(c + (" TEXT PRIMARY KEY" if c == "request_id" else "") for c in COLUMNS)}
);
CREATE INDEX IF NOT EXISTS requests_ts ON requests (ts);
"""


def record_row(record: RequestRecord) -> dict[str, Any]:
    route = record.route
    usage = record.usage
    return {
        "request_id": record.request_id,
        "ts": record.started_at,
        "tenant": record.tenant,
        "model": record.model,
        "stream": int(record.stream),
        "lane": route.lane if route else None,
        "channel": route.channel if route else None,
        "rule": route.rule if route else None,
        "score": route.score if route else None,
        "cache": record.cache.value,
        "similarity": record.similarity,
        "status": record.status,
        "error_code": record.error_code,
        "prompt_tokens": usage.prompt_tokens if usage else None,
        "completion_tokens": usage.completion_tokens if usage else None,
        "usage_estimated": int(usage.estimated) if usage else None,
        "cost_usd": record.cost_usd,
        "latency_ms": round(record.latency_ms, 3),
        "upstream_ms": record.upstream_ms,
        "ttft_ms": record.ttft_ms,
        "retries": record.retries,
        "fallback": record.fallback,
        "cache_key": record.cache_key,
    }


class SqliteRequestLog:
    """Journal-then-SQLite request log.  ``write`` is cheap and safe to call on the event loop."""

    def __init__(self, path: Path, *, flush_interval_s: float = 0.2) -> None:
        self.path = path
        self._journal_path = path.with_name(path.name + ".journal")
        self._flush_interval_s = flush_interval_s
        self._lock = threading.Lock()  # guards the journal fd and its rotation
        self._flush_lock = threading.Lock()  # one flush at a time
        self._stop = threading.Event()
        self._pending = 0
        self._rotation = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._replay_leftovers()
        self._fd = self._open_journal()
        self._thread = threading.Thread(target=self._run, name="request-log", daemon=True)
        self._thread.start()

    def write(self, record: RequestRecord) -> None:
        line = orjson.dumps(record_row(record)) + b"\n"
        with self._lock:
            os.write(self._fd, line)
            self._pending += 1

    def flush(self) -> int:
        """Move everything journaled so far into SQLite; return the number of rows moved."""
        with self._flush_lock:
            with self._lock:
                if self._pending == 0:
                    return 0
                self._rotation += 1
                rotated = self._journal_path.with_name(
                    f"{self._journal_path.name}.{os.getpid()}.{self._rotation}"
                )
                os.close(self._fd)
                os.replace(self._journal_path, rotated)
                self._fd = self._open_journal()
                self._pending = 0
            return self._ingest(rotated)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.flush()
        with self._lock:
            os.close(self._fd)
        if self._journal_path.exists() and self._journal_path.stat().st_size == 0:
            self._journal_path.unlink()
        self._db.close()

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Read-only access for reports and tests (after ``flush``)."""
        with self._flush_lock:
            return list(self._db.execute(sql, params))

    def _open_journal(self) -> int:
        return os.open(self._journal_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def _run(self) -> None:
        while not self._stop.wait(self._flush_interval_s):
            self.flush()

    def _replay_leftovers(self) -> None:
        pattern = self._journal_path.name + "*"
        for leftover in sorted(self.path.parent.glob(pattern)):
            self._ingest(leftover)

    def _ingest(self, journal: Path) -> int:
        rows = list(_read_rows(journal.read_bytes().splitlines()))
        if rows:
            sql = (
                f"INSERT OR IGNORE INTO requests ({', '.join(COLUMNS)}) "
                f"VALUES ({', '.join('?' for _ in COLUMNS)})"
            )
            self._db.execute("BEGIN")
            self._db.executemany(sql, ([row.get(c) for c in COLUMNS] for row in rows))
            self._db.execute("COMMIT")
        journal.unlink()
        return len(rows)


def _read_rows(lines: Iterable[bytes]) -> Iterable[dict[str, Any]]:
    for line in lines:
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a line torn by a crash mid-write: the request was never acknowledged
        if isinstance(row, dict) and "request_id" in row:
            yield row
