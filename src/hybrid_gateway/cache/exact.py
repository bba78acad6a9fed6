"""The exact cache: answers to byte-for-byte the same question (by canonical key).

In-process, bounded by entry count and by bytes, least recently used first out, entries older
than the TTL are never served.  Only complete, successful answers are put here (the pipeline
decides that); an error, a partial stream or a tool call never is.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.types import CachedAnswer, Usage


class ExactCache(Protocol):
    async def get(self, key: str) -> CachedAnswer | None: ...

    async def put(self, key: str, body: bytes, usage: Usage) -> None: ...

    async def aclose(self) -> None: ...


class MemoryExactCache:
    """LRU + TTL + byte budget, in this process."""

    def __init__(self, *, ttl_s: float, max_entries: int, max_bytes: int, clock: Clock) -> None:
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._clock = clock
        self._entries: OrderedDict[str, CachedAnswer] = OrderedDict()
        self._bytes = 0

    @property
    def entries(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    async def get(self, key: str) -> CachedAnswer | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self._clock.now() - entry.created_at > self._ttl_s:
            self._remove(key)
            return None
        self._entries.move_to_end(key)
        return entry

    async def put(self, key: str, body: bytes, usage: Usage) -> None:
        size = len(body)
        if size > self._max_bytes:
            return  # one answer bigger than the whole budget is not worth evicting everything
        if key in self._entries:
            self._remove(key)
        self._entries[key] = CachedAnswer(body=body, usage=usage, created_at=self._clock.now())
        self._bytes += size
        while len(self._entries) > self._max_entries or self._bytes > self._max_bytes:
            oldest = next(iter(self._entries))
            self._remove(oldest)

    async def aclose(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def _remove(self, key: str) -> None:
        entry = self._entries.pop(key)
        self._bytes -= len(entry.body)
