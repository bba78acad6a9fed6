"""The exact cache and deferred results as blobs in the shared store, with a TTL.

``SharedExactCache`` is an ``ExactCache``: an answer cached through one replica is an exact hit
through every other.  Entries expire by the store's TTL; entries larger than
``max_entry_bytes`` are not stored; the total is bounded by the Redis server's ``maxmemory``
and eviction policy (``allkeys-lru`` in deploy/).  While the store is down the cache is
bypassed: every lookup is a miss and nothing is stored (``cache_on_outage: bypass``).

``ResultsMirror`` copies each deferred-result entry (pending, done, failed) into the store,
through the outbox, so that ``GET /v1/gateway/results/{id}`` is answered by any replica;
``publish`` returns the write's future (the deadline runner holds the fallback answer on the
``pending`` write, bounded, so the URL works everywhere once the client has it).  While the
store is down only the replica that ran the request can answer it; another replica answers 503
``store_unavailable`` with ``Retry-After`` (it cannot tell, so it does not claim the id is
unknown).

Ages are carried as wall-clock stamps (monotonic clocks differ per process); skew between
replicas' clocks only shifts the reported age, never the expiry, which is Redis's.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict

import orjson

from hybrid_gateway.errors import Overloaded
from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.results.store import DeferredResult, ResultState
from hybrid_gateway.stores.base import KVStore, StoreUnavailable
from hybrid_gateway.stores.outbox import Outbox
from hybrid_gateway.types import CachedAnswer, Usage

__all__ = ["ResultsMirror", "SharedExactCache"]


def _pack(header: object, body: bytes) -> bytes:
    return orjson.dumps(header) + b"\n" + body


def _unpack(blob: bytes) -> tuple[object, bytes]:
    head, _, body = blob.partition(b"\n")
    return orjson.loads(head), body


class SharedExactCache:
    def __init__(
        self,
        store: KVStore,
        *,
        ttl_s: float,
        max_entry_bytes: int,
        clock: Clock,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._max = max_entry_bytes
        self._clock = clock
        self._wall = wall

    async def get(self, key: str) -> CachedAnswer | None:
        try:
            blob = await self._store.get("exact:" + key)
        except StoreUnavailable:
            return None
        if blob is None:
            return None
        header, body = _unpack(blob)
        if not isinstance(header, list) or len(header) != 4:
            return None
        prompt, completion, estimated, stamp = header
        age = max(0.0, self._wall() - float(stamp))
        usage = Usage(int(prompt), int(completion), bool(estimated))
        return CachedAnswer(body=body, usage=usage, created_at=self._clock.now() - age)

    async def put(self, key: str, body: bytes, usage: Usage) -> None:
        if len(body) > self._max:
            return
        header = [usage.prompt_tokens, usage.completion_tokens, usage.estimated, self._wall()]
        try:
            await self._store.set("exact:" + key, _pack(header, body), self._ttl_s)
        except StoreUnavailable:
            return

    async def aclose(self) -> None:
        return None


class ResultsMirror:
    def __init__(self, store: KVStore, outbox: Outbox, clock: Clock, *, retry_s: float) -> None:
        self._store = store
        self._outbox = outbox
        self._clock = clock
        self._retry_s = retry_s

    def publish(self, entry: DeferredResult, ttl_s: float) -> Awaitable[None] | None:
        if ttl_s <= 0:
            return None
        header = {k: v for k, v in asdict(entry).items() if k != "body"}
        blob = _pack(header, entry.body)
        key = "result:" + entry.request_id
        return self._outbox.submit(lambda: self._store.set(key, blob, ttl_s))

    async def fetch(self, request_id: str) -> DeferredResult | None:
        """The shared entry, None when there is none; ``Overloaded`` when the store is down."""
        try:
            blob = await self._store.get("result:" + request_id)
        except StoreUnavailable as exc:
            raise Overloaded(
                "The shared store is unreachable, so this replica cannot see results that "
                "other replicas recorded; retry, or ask the replica that answered the request.",
                retry_after_s=self._retry_s,
                code="store_unavailable",
            ) from exc
        if blob is None:
            return None
        header, body = _unpack(blob)
        if not isinstance(header, dict):
            return None
        return DeferredResult(
            request_id=str(header["request_id"]), tenant=str(header["tenant"]),
            lane=str(header["lane"]), state=ResultState(header["state"]),
            opened_at=self._clock.now(), body=body, status=int(header["status"]),
            error_code=header.get("error_code"), error_message=header.get("error_message"),
        )  # fmt: skip
