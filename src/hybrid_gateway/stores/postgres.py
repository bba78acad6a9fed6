"""Connections to the shared PostgreSQL (``stores.records: postgres``), and its health.

The records (request log, feedback) and the semantic-cache vectors of every replica live in one
PostgreSQL.  ``PostgresPool`` hands its few connections (``postgres_pool_size``) to sync
callers in worker threads (the log flusher, the feedback store's ``to_thread`` calls); the
event loop never waits on PostgreSQL.  Every call goes through ``run``, which applies the
outage rules of ``StoreHealth``: a connection or statement failure (refused, timed out, server
shut down) marks the store down and raises ``StoreUnavailable``; while down, calls fail at once
without a connection attempt, except one try every ``retry_s``; the first success marks it up.
A pooled connection that broke while idle (the server restarted) is replaced and the call
tried once more on a fresh one before anything is marked down.

Callers write SQL with ``?`` placeholders, as for SQLite; ``pyformat`` translates them.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from hybrid_gateway.stores.base import StoreUnavailable
from hybrid_gateway.stores.health import StoreHealth

try:
    import psycopg
except ImportError as exc:  # pragma: no cover - the postgres extra is part of the test install
    raise ImportError(
        "stores.records: postgres needs psycopg: pip install 'hybrid-gateway[postgres]'"
    ) from exc

__all__ = ["Connection", "PostgresPool", "connect", "pyformat"]

T = TypeVar("T")
Connection = psycopg.Connection[tuple[Any, ...]]


@functools.lru_cache(maxsize=256)
def pyformat(sql: str) -> str:
    """``sql`` with ``?`` placeholders as psycopg's ``%s`` (and a literal ``%`` as ``%%``).

    Question marks inside quoted strings and identifiers are left alone.
    """
    out: list[str] = []
    quote: str | None = None
    for char in sql:
        if quote is not None:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "?":
            out.append("%s")
            continue
        out.append("%%" if char == "%" else char)
    return "".join(out)


class PostgresPool:
    """At most ``size`` connections, opened on demand; thread-safe."""

    def __init__(self, url: str, *, size: int, timeout_ms: int, health: StoreHealth) -> None:
        self.url = url
        self.health = health
        self._timeout_s = timeout_ms / 1000
        self._timeout_ms = timeout_ms
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._idle: list[Connection] = []
        self._closed = False

    def run(self, op: str, work: Callable[[Connection], T]) -> T:
        """``work(connection)``; raises ``StoreUnavailable`` when PostgreSQL cannot be reached.

        ``op`` names the operation in the errors metric (``insert``, ``feedback``, ...).
        """
        self.health.check()
        if not self._slots.acquire(timeout=self._timeout_s):
            raise StoreUnavailable(f"no free PostgreSQL connection within {self._timeout_s} s")
        try:
            return self._run(op, work)
        finally:
            self._slots.release()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
            self._closed = True
        for conn in idle:
            conn.close()

    def _run(self, op: str, work: Callable[[Connection], T]) -> T:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        reused = conn is not None
        while True:
            try:
                if conn is None:
                    conn = self._connect()
                result = work(conn)
            except psycopg.OperationalError as exc:
                if conn is not None:
                    conn.close()
                    conn = None
                if reused:  # it may have broken while idle: one more try on a fresh one
                    reused = False
                    continue
                self.health.failed(op, exc)
                raise StoreUnavailable(f"PostgreSQL: {exc}".strip()) from exc
            except BaseException:
                if conn is not None:
                    self._put_back(conn)
                raise
            self.health.succeeded()
            self._put_back(conn)
            return result

    def _put_back(self, conn: Connection) -> None:
        with self._lock:
            if not self._closed and not conn.closed:
                self._idle.append(conn)
                return
        conn.close()

    def _connect(self) -> Connection:
        return connect(self.url, self._timeout_ms)


def connect(url: str, timeout_ms: int) -> Connection:
    """An autocommit connection whose connect and every statement give up after
    ``timeout_ms`` (``stores.postgres_timeout_ms``)."""
    return psycopg.connect(
        url,
        autocommit=True,
        # libpq counts whole seconds (and reads 1 as 2)
        connect_timeout=max(2, math.ceil(timeout_ms / 1000)),
        options=f"-c statement_timeout={timeout_ms}",
    )
