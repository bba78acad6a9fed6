"""The semantic cache: answers to questions that mean the same, per tenant and per model version.

    namespace  (tenant or its declared shared scope, embedder ``model@version``)
    partition  namespace + bucket (model asked for, conversation context, answer params)
    entry      question text, its vector, the complete answer body, usage, times

A lookup searches only the request's partition, takes the nearest stored question and lets the
``DecisionRule`` judge it; the answer is served only on a hit.  Bounded like the exact cache:
entry count and bytes (answer + question + vector), least recently used out first, and entries
older than ``ttl_s`` are never served.  With a ``SqliteEntryStore`` every change is written
behind, by the store's own writer thread, and a restart loads the entries back.

All state (index, LRU order, store) is touched only from one worker thread: a brute-force
search over a large partition takes milliseconds and must not stall the event loop, and the
store's reading connection stays on one thread.  Times are wall-clock seconds
(``clock.now()`` plus an epoch offset taken at start), so a TTL spans restarts and tests still
drive time by hand.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TypeVar

from hybrid_gateway.cache.semantic.decision import DecisionRule, Verdict
from hybrid_gateway.cache.semantic.index import NumpyIndex, VectorIndex
from hybrid_gateway.cache.semantic.store import SqliteEntryStore, StoredEntry
from hybrid_gateway.embedding.base import Vector
from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.types import Usage

T = TypeVar("T")
_ENTRY_OVERHEAD = 200  # bytes of bookkeeping per entry (dict slots, ids, the LRU link)
_EXPIRED_PER_LOOKUP = 8  # expired nearest entries one lookup removes before it gives up
_ID_BLOCK = 1024  # entry ids reserved in the store's file at a time


@dataclass(frozen=True, slots=True)
class Namespace:
    scope: str  # the tenant, or the shared cache_scope it declared
    embedder: str  # model_id@version

    def partition(self, bucket: str) -> str:
        return f"{self.scope}\x1f{self.embedder}\x1f{bucket}"


@dataclass(frozen=True, slots=True)
class SemanticLookup:
    """The nearest candidate and the verdict on it (``entry`` is None when nothing was near)."""

    verdict: Verdict | None
    entry: StoredEntry | None

    @property
    def hit(self) -> bool:
        return self.verdict is not None and self.verdict.hit


@dataclass(frozen=True, slots=True)
class CacheBounds:
    ttl_s: float
    max_entries: int
    max_bytes: int


def entry_bytes(entry: StoredEntry) -> int:
    return len(entry.body) + len(entry.question.encode()) + entry.vector.nbytes + _ENTRY_OVERHEAD


class SemanticCache:
    def __init__(
        self,
        *,
        bounds: CacheBounds,
        rule: DecisionRule,
        clock: Clock,
        store: SqliteEntryStore | None = None,
        index: VectorIndex | None = None,
        epoch: float | None = None,
    ) -> None:
        self._bounds = bounds
        self.rule = rule
        self._clock = clock
        self._epoch = time.time() - clock.now() if epoch is None else epoch
        self._store = store
        self._index: VectorIndex = index if index is not None else NumpyIndex()
        self._entries: OrderedDict[int, StoredEntry] = OrderedDict()  # LRU order: oldest first
        self._bytes = 0
        self._next_id = 1
        self._ids_left = 0  # ids reserved in the store's file and not used yet
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="semantic-cache")

    # -- figures ---------------------------------------------------------------------------
    @property
    def entries(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def wall_now(self) -> float:
        return self._clock.now() + self._epoch

    @property
    def health(self) -> None:
        return None  # nothing shared: the entries live in this process

    async def stats(self) -> dict[str, object]:
        backend = "memory" if self._store is None else "sqlite"
        return {"backend": backend, "entries": self.entries, "bytes": self.size_bytes}

    # -- lifecycle -------------------------------------------------------------------------
    async def load(self, embedder: str) -> int:
        """Read the current embedder's entries back from the store; returns how many."""
        return await self._run(lambda: self._load(embedder))

    def load_at_start(self, embedder: str) -> int:
        """``load`` for start-up code that is not async yet (blocks until loaded)."""
        return self._executor.submit(self._load, embedder).result()

    async def aclose(self) -> None:
        await self._run(self._close)
        self._executor.shutdown(wait=True)

    # -- the request path ------------------------------------------------------------------
    async def lookup(
        self, namespace: Namespace, bucket: str, question: str, vector: Vector
    ) -> SemanticLookup:
        return await self._run(lambda: self._lookup(namespace, bucket, question, vector))

    async def put(
        self,
        namespace: Namespace,
        bucket: str,
        question: str,
        vector: Vector,
        body: bytes,
        usage: Usage,
    ) -> int | None:
        """Store a complete answer; returns its entry id (None when it exceeds the byte bound)."""
        return await self._run(lambda: self._put(namespace, bucket, question, vector, body, usage))

    # -- admin -----------------------------------------------------------------------------
    async def get(self, entry_id: int) -> StoredEntry | None:
        return await self._run(lambda: self._entries.get(entry_id))

    async def invalidate(self, entry_id: int) -> bool:
        return await self._run(lambda: self._invalidate([entry_id]) == 1)

    async def invalidate_scope(self, scope: str) -> int:
        """Drop every entry of a tenant scope (all buckets, all embedder versions)."""
        return await self._run(lambda: self._invalidate_scope(scope))

    async def correct(self, entry_id: int, body: bytes) -> bool:
        """Replace a cached answer (the operator's fix for a flagged one); keeps its question."""
        return await self._run(lambda: self._correct(entry_id, body))

    async def find(
        self, namespace: Namespace, bucket: str, vector: Vector, k: int = 5
    ) -> list[tuple[StoredEntry, float]]:
        """The ``k`` nearest entries of a partition, for an operator looking for a bad answer."""
        return await self._run(lambda: self._find(namespace, bucket, vector, k))

    # -- worker-thread side ----------------------------------------------------------------
    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _take_id(self) -> int:
        """A new entry's id: from a block reserved in the store's file (unique across the
        processes sharing it), else from this cache's own count."""
        if self._store is not None:
            if self._ids_left == 0:
                self._next_id = self._store.reserve_ids(_ID_BLOCK)
                self._ids_left = _ID_BLOCK
            self._ids_left -= 1
        taken, self._next_id = self._next_id, self._next_id + 1
        return taken

    def _load(self, embedder: str) -> int:
        if self._store is None:
            return 0
        self._ids_left = 0  # the first entry reserves a block of ids (store.reserve_ids)
        now = self.wall_now()
        stale: list[int] = []
        loaded: list[StoredEntry] = []
        for entry in self._store.load(embedder):
            size = entry_bytes(entry)
            fits = (
                len(loaded) < self._bounds.max_entries
                and self._bytes + size <= self._bounds.max_bytes
            )
            if now - entry.created_at > self._bounds.ttl_s or not fits:
                stale.append(entry.id)
                continue
            loaded.append(entry)
            self._bytes += size
        for entry in reversed(loaded):  # oldest use first in the LRU order
            self._entries[entry.id] = entry
            self._index.add(Namespace(entry.scope, entry.embedder).partition(entry.bucket),
                            entry.id, entry.vector)  # fmt: skip
        self._store.delete(stale)
        return len(loaded)

    def _close(self) -> None:
        if self._store is not None:
            self._store.close()
        self._entries.clear()
        self._bytes = 0

    def _lookup(
        self, namespace: Namespace, bucket: str, question: str, vector: Vector
    ) -> SemanticLookup:
        now = self.wall_now()
        for _ in range(_EXPIRED_PER_LOOKUP):  # an expired nearest entry must not hide the next
            found = self._index.search(namespace.partition(bucket), vector, 1)
            if not found:
                return SemanticLookup(None, None)
            entry_id, similarity = found[0]
            entry = self._entries[entry_id]
            if now - entry.created_at <= self._bounds.ttl_s:
                break
            self._invalidate([entry_id])
        else:
            return SemanticLookup(None, None)  # the rest waits for the next lookups
        verdict = self.rule.judge(question, entry.question, similarity, (vector, entry.vector))
        if verdict.hit:
            self._entries.move_to_end(entry_id)
            self._entries[entry_id] = entry = replace(entry, last_used=now)
            if self._store is not None:
                self._store.touch(entry_id, now)
        return SemanticLookup(verdict, entry)

    def _put(
        self,
        namespace: Namespace,
        bucket: str,
        question: str,
        vector: Vector,
        body: bytes,
        usage: Usage,
    ) -> int | None:
        now = self.wall_now()
        entry = StoredEntry(
            id=0, scope=namespace.scope, embedder=namespace.embedder, bucket=bucket,
            question=question, vector=vector, body=body, usage=usage, created_at=now,
            last_used=now,
        )  # fmt: skip
        size = entry_bytes(entry)
        if size > self._bounds.max_bytes:
            return None
        entry = replace(entry, id=self._take_id())
        self._entries[entry.id] = entry
        self._bytes += size
        self._index.add(namespace.partition(bucket), entry.id, vector)
        if self._store is not None:
            self._store.put(entry)
        self._evict(keep=entry.id)
        return entry.id

    def _evict(self, keep: int) -> None:
        """Least recently used out until the bounds hold again (never ``keep``)."""
        evicted: list[int] = []
        bounds = self._bounds
        while len(self._entries) > 1 and (
            len(self._entries) > bounds.max_entries or self._bytes > bounds.max_bytes
        ):
            oldest = next(iter(self._entries))
            if oldest == keep:  # (a corrected entry counts as just used)
                self._entries.move_to_end(keep)
                continue
            evicted.append(oldest)
            self._forget(oldest)
        if evicted and self._store is not None:
            self._store.delete(evicted)

    def _forget(self, entry_id: int) -> StoredEntry | None:
        entry = self._entries.pop(entry_id, None)
        if entry is not None:
            self._bytes -= entry_bytes(entry)
            self._index.remove(Namespace(entry.scope, entry.embedder).partition(entry.bucket),
                               entry_id)  # fmt: skip
        return entry

    def _invalidate(self, ids: list[int]) -> int:
        gone = [i for i in ids if self._forget(i) is not None]
        if self._store is not None:
            self._store.delete(ids)
        return len(gone)

    def _invalidate_scope(self, scope: str) -> int:
        ids = [e.id for e in self._entries.values() if e.scope == scope]
        for entry_id in ids:
            self._forget(entry_id)
        if self._store is not None:
            self._store.delete_scope(scope)
        return len(ids)

    def _correct(self, entry_id: int, body: bytes) -> bool:
        entry = self._entries.get(entry_id)
        if entry is None:
            return False
        fixed = replace(entry, body=body)
        self._bytes += len(body) - len(entry.body)
        self._entries[entry_id] = fixed
        if self._store is not None:
            self._store.replace_body(entry_id, body)
        self._evict(keep=entry_id)  # a longer answer may take the cache over its byte bound
        return True

    def _find(
        self, namespace: Namespace, bucket: str, vector: Vector, k: int
    ) -> list[tuple[StoredEntry, float]]:
        found = self._index.search(namespace.partition(bucket), vector, k)
        return [(self._entries[i], score) for i, score in found if i in self._entries]
