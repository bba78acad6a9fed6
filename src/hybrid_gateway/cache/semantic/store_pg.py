"""The semantic cache in PostgreSQL + pgvector, shared by every replica (``records: postgres``).

Every lookup is one query: the nearest stored question *inside* the request's partition,

    WHERE scope = $scope AND embedder = $model@version AND bucket = $bucket
      AND created_at >= now - ttl
    ORDER BY vector <#> $q LIMIT k

served by a b-tree on (scope, embedder, bucket, created_at) and an exact distance over that
partition's rows: the namespace and bucket are part of the search, never a filter applied to
approximate results afterwards, and an entry written through one replica is found by the next
lookup on any other.  Why exact and not an HNSW/IVFFlat index, with figures: docs/scale-out.md
("Semantic vectors").  Vectors are L2-normalised, so the negative inner product ``<#>`` is the
cosine (an untyped ``vector`` column: one table serves any embedder, the embedder column keeps
models apart).

Bounds are shared by all replicas: rows older than ``ttl_s`` are never served and are purged,
and the row count is trimmed to ``max_entries`` (least recently used first, ``last_used`` is
updated on every hit) after a put once this replica's count says it is over, and every
``MAINTAIN_S`` of puts (one replica at a time, under an advisory lock).  ``max_bytes`` bounds
one entry only (the table's size is the row bound times the entry size; PostgreSQL's disk
holds it, not this process's memory).

Outage (``semantic_on_outage: bypass``): a failed or overrunning call (``timeout_s``) marks the
shared ``StoreHealth`` down and raises ``StoreUnavailable`` (the stage makes it a miss and
stores nothing); while down, calls fail at once without touching the network, and one
background probe per ``retry_s`` reconnects; its success marks the store up again.  All SQL
runs on one worker thread with one connection; a call that overruns abandons that thread and
its connection to a fresh pair, so a stalled server cannot hold later calls behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np
import psycopg

from hybrid_gateway.cache.semantic.cache import CacheBounds, Namespace, SemanticLookup, entry_bytes
from hybrid_gateway.cache.semantic.decision import DecisionRule
from hybrid_gateway.cache.semantic.store import StoredEntry
from hybrid_gateway.embedding.base import Vector
from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.stores.base import StoreUnavailable
from hybrid_gateway.stores.health import StoreHealth
from hybrid_gateway.stores.postgres import connect
from hybrid_gateway.types import Usage

__all__ = ["MAINTAIN_S", "TABLE", "PgSemanticCache", "vector_literal"]

T = TypeVar("T")
_log = logging.getLogger(__name__)

TABLE = "hgw_semantic_entries"
MAINTAIN_S = 5.0  # purge expired rows and trim to max_entries at least this often (on puts)
_LOCK = 0x68677773  # advisory lock around the schema (replicas starting together)
_SCHEMA = (
    "CREATE EXTENSION IF NOT EXISTS vector",
    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
        id BIGSERIAL PRIMARY KEY,
        scope TEXT NOT NULL,
        embedder TEXT NOT NULL,
        bucket TEXT NOT NULL,
        question TEXT NOT NULL,
        vector vector NOT NULL,
        body BYTEA NOT NULL,
        prompt_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        usage_estimated BOOLEAN NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        last_used DOUBLE PRECISION NOT NULL)""",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_partition "
    f"ON {TABLE} (scope, embedder, bucket, created_at)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_used ON {TABLE} (last_used, id)",
)
_COLUMNS = (
    "id, scope, embedder, bucket, question, vector::text, body, prompt_tokens, "
    "completion_tokens, usage_estimated, created_at, last_used"
)
# The inner query ranks ids only: PostgreSQL computes the select list for every row before a
# top-k sort, and printing each row's vector as text would cost ~17 us a row.
_NEAREST = (
    f"SELECT {_COLUMNS}, -near.distance FROM (SELECT id, vector <#> %(q)s::vector AS distance "
    f"FROM {TABLE} WHERE scope = %(scope)s AND embedder = %(embedder)s "
    "AND bucket = %(bucket)s AND created_at >= %(since)s ORDER BY distance LIMIT %(k)s) near "
    f"JOIN {TABLE} USING (id) ORDER BY near.distance"
)
_OUTAGE = (psycopg.OperationalError, psycopg.InterfaceError)


def vector_literal(vector: Vector) -> str:
    """pgvector's text form; float32 values printed exactly (shortest round-trip repr)."""
    return "[" + ",".join(map(repr, vector.astype(np.float32).tolist())) + "]"


def _entry(row: Sequence[Any]) -> StoredEntry:
    return StoredEntry(
        id=int(row[0]), scope=row[1], embedder=row[2], bucket=row[3], question=row[4],
        vector=np.array(row[5][1:-1].split(","), dtype=np.float32), body=bytes(row[6]),
        usage=Usage(row[7], row[8], bool(row[9])), created_at=row[10], last_used=row[11],
    )  # fmt: skip


class _Worker:
    """One thread and its connection (created on first use, dropped on a connection error)."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="semantic-pg")
        self._url = url
        self._timeout_ms = max(1, int(timeout_s * 1000))
        self._conn: psycopg.Connection[Any] | None = None

    def call(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        try:
            return fn(self._conn)
        except _OUTAGE:
            self.drop()
            raise

    def drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def _connect(self) -> psycopg.Connection[Any]:
        conn = connect(self._url, self._timeout_ms)
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
                for statement in _SCHEMA:
                    conn.execute(statement)
        except BaseException:
            conn.close()
            raise
        return conn


class PgSemanticCache:
    def __init__(
        self,
        url: str,
        *,
        bounds: CacheBounds,
        rule: DecisionRule,
        clock: Clock,
        health: StoreHealth,
        timeout_s: float,
        epoch: float | None = None,
    ) -> None:
        self.rule = rule
        self._health = health
        self._url = url
        self._bounds = bounds
        self._clock = clock
        self._timeout_s = timeout_s
        self._epoch = time.time() - clock.now() if epoch is None else epoch
        self._worker = _Worker(url, timeout_s)
        self._probe: asyncio.Task[None] | None = None
        self._rows = 0  # this replica's view of the table's row count (exact after a trim)
        self._maintain_at = 0.0

    @property
    def health(self) -> StoreHealth:
        return self._health

    def wall_now(self) -> float:
        return self._clock.now() + self._epoch

    # -- the request path ------------------------------------------------------------------
    async def lookup(
        self, namespace: Namespace, bucket: str, question: str, vector: Vector
    ) -> SemanticLookup:
        found = await self._nearest("lookup", namespace, bucket, vector, 1)
        if not found:
            return SemanticLookup(None, None)
        entry, similarity = found[0]
        verdict = self.rule.judge(question, entry.question, similarity, (vector, entry.vector))
        if verdict.hit:
            now = self.wall_now()
            await self._call("touch", lambda c: c.execute(
                f"UPDATE {TABLE} SET last_used = %s WHERE id = %s", (now, entry.id)))  # fmt: skip
            entry = replace(entry, last_used=now)
        return SemanticLookup(verdict, entry)

    async def put(
        self, namespace: Namespace, bucket: str, question: str, vector: Vector, body: bytes,
        usage: Usage,
    ) -> int | None:  # fmt: skip
        now = self.wall_now()
        entry = StoredEntry(0, namespace.scope, namespace.embedder, bucket, question, vector,
                            body, usage, now, now)  # fmt: skip
        if entry_bytes(entry) > self._bounds.max_bytes:
            return None
        params = (
            entry.scope, entry.embedder, bucket, question, vector_literal(vector), body,
            usage.prompt_tokens, usage.completion_tokens, usage.estimated, now, now,
        )  # fmt: skip

        def insert(conn: psycopg.Connection[Any]) -> int:
            row = conn.execute(
                f"INSERT INTO {TABLE} (scope, embedder, bucket, question, vector, body, "
                "prompt_tokens, completion_tokens, usage_estimated, created_at, last_used) "
                "VALUES (%s, %s, %s, %s, %s::vector, %s, %s, %s, %s, %s, %s) RETURNING id",
                params,
            ).fetchone()
            assert row is not None
            return int(row[0])

        entry_id = await self._call("put", insert)
        self._rows += 1
        if self._rows > self._bounds.max_entries or self._clock.now() >= self._maintain_at:
            await self.maintain()
        return entry_id

    async def maintain(self) -> int:
        """Purge expired rows, trim to ``max_entries`` (least recently used first); row count."""
        cutoff = self.wall_now() - self._bounds.ttl_s
        keep = self._bounds.max_entries

        def trim(conn: psycopg.Connection[Any]) -> int:
            with conn.transaction():  # one replica trims at a time (the others count only)
                row = conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (_LOCK + 1,)).fetchone()
                mine = row is not None and bool(row[0])
                if mine:
                    conn.execute(f"DELETE FROM {TABLE} WHERE created_at < %s", (cutoff,))
                row = conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
                rows = int(row[0]) if row is not None else 0
                if rows <= keep or not mine:
                    return rows
                conn.execute(
                    f"DELETE FROM {TABLE} WHERE id IN (SELECT id FROM {TABLE} "
                    "ORDER BY last_used, id LIMIT %s)", (rows - keep,),
                )  # fmt: skip
                return keep

        self._rows = await self._call("maintain", trim)
        self._maintain_at = self._clock.now() + MAINTAIN_S
        return self._rows

    # -- admin -----------------------------------------------------------------------------
    async def get(self, entry_id: int) -> StoredEntry | None:
        def read(conn: psycopg.Connection[Any]) -> StoredEntry | None:
            row = conn.execute(f"SELECT {_COLUMNS} FROM {TABLE} WHERE id = %s",
                               (entry_id,)).fetchone()  # fmt: skip
            return None if row is None else _entry(row)

        return await self._call("get", read)

    async def invalidate(self, entry_id: int) -> bool:
        return await self._changed("invalidate", f"DELETE FROM {TABLE} WHERE id = %s",
                                   (entry_id,)) == 1  # fmt: skip

    async def invalidate_scope(self, scope: str) -> int:
        """Drop every entry of a tenant scope (all buckets, all embedder versions)."""
        return await self._changed("invalidate", f"DELETE FROM {TABLE} WHERE scope = %s",
                                   (scope,))  # fmt: skip

    async def correct(self, entry_id: int, body: bytes) -> bool:
        return await self._changed("correct", f"UPDATE {TABLE} SET body = %s WHERE id = %s",
                                   (body, entry_id)) == 1  # fmt: skip

    async def find(
        self, namespace: Namespace, bucket: str, vector: Vector, k: int = 5
    ) -> list[tuple[StoredEntry, float]]:
        return await self._nearest("find", namespace, bucket, vector, k)

    async def stats(self) -> dict[str, object]:
        body: dict[str, object] = {"backend": "postgres", **self._health.status(),
                                   "entries": None, "bytes": None}  # fmt: skip
        since = self.wall_now() - self._bounds.ttl_s

        def count(conn: psycopg.Connection[Any]) -> tuple[int, int]:
            row = conn.execute(
                "SELECT count(*), COALESCE(sum(octet_length(body) + octet_length(question) "
                f"+ 4 * vector_dims(vector)), 0) FROM {TABLE} WHERE created_at >= %s", (since,),
            ).fetchone()  # fmt: skip
            return (0, 0) if row is None else (int(row[0]), int(row[1]))

        with contextlib.suppress(StoreUnavailable):
            body["entries"], body["bytes"] = await self._call("stats", count)
        return body

    async def aclose(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
            self._probe = None
        worker = self._worker
        await asyncio.get_running_loop().run_in_executor(worker.executor, worker.drop)
        worker.executor.shutdown(wait=True)

    # -- plumbing --------------------------------------------------------------------------
    async def _nearest(
        self, op: str, namespace: Namespace, bucket: str, vector: Vector, k: int
    ) -> list[tuple[StoredEntry, float]]:
        params = {
            "q": vector_literal(vector), "scope": namespace.scope,
            "embedder": namespace.embedder, "bucket": bucket,
            "since": self.wall_now() - self._bounds.ttl_s, "k": k,
        }  # fmt: skip
        rows = await self._call(op, lambda c: c.execute(_NEAREST, params).fetchall())
        return [(_entry(row), float(row[12])) for row in rows]

    async def _changed(self, op: str, sql: str, params: tuple[object, ...]) -> int:
        return await self._call(op, lambda c: c.execute(sql, params).rowcount)

    async def _call(self, op: str, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``fn`` on the worker; an outage marks the store down and raises at once."""
        if not self._health.up:
            raise StoreUnavailable(f"postgres down: {self._health.last_error}")
        worker = self._worker
        future = asyncio.get_running_loop().run_in_executor(worker.executor, worker.call, fn)
        try:
            return await asyncio.wait_for(future, self._timeout_s)
        except TimeoutError as exc:
            self._abandon(worker)
            self._down(op, exc)
            raise StoreUnavailable(f"postgres did not answer within {self._timeout_s}s") from None
        except _OUTAGE as exc:
            self._down(op, exc)
            raise StoreUnavailable(f"postgres unreachable: {exc}") from None

    def _abandon(self, worker: _Worker) -> None:
        """A call overran: the next calls get a fresh thread and connection."""
        if self._worker is worker:
            self._worker = _Worker(self._url, self._timeout_s)
        worker.executor.submit(worker.drop)  # runs once the stuck call returns
        worker.executor.shutdown(wait=False)

    def _down(self, op: str, exc: BaseException) -> None:
        self._health.failed(f"semantic_{op}", exc)
        if self._probe is None or self._probe.done():
            self._probe = asyncio.get_running_loop().create_task(self._recover())

    async def _recover(self) -> None:
        """While down: one connection attempt per ``retry_s``; the first success marks it up."""
        while not self._health.up:
            await self._clock.sleep(self._health.retry_s)
            worker = self._worker
            future = asyncio.get_running_loop().run_in_executor(
                worker.executor, worker.call, lambda c: c.execute("SELECT 1")
            )
            try:
                await asyncio.wait_for(future, self._timeout_s)
            except TimeoutError as exc:
                self._abandon(worker)
                self._health.failed("semantic_ping", exc)
            except Exception as exc:
                self._health.failed("semantic_ping", exc)
            else:
                self._health.succeeded()
