from __future__ import annotations

from hybrid_gateway.cache.exact import MemoryExactCache
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.types import Usage

USAGE = Usage(10, 5)


def make(clock: ManualClock, **kw: int) -> MemoryExactCache:
    kw.setdefault("max_entries", 100)
    kw.setdefault("max_bytes", 10_000)
    return MemoryExactCache(ttl_s=60, clock=clock, **kw)


async def test_hit_then_expiry_after_ttl() -> None:
    clock = ManualClock()
    cache = make(clock)
    await cache.put("k", b"answer", USAGE)
    entry = await cache.get("k")
    assert entry is not None and entry.body == b"answer" and entry.usage == USAGE
    await clock.advance(59.9)
    assert await cache.get("k") is not None
    await clock.advance(0.2)
    assert await cache.get("k") is None
    assert cache.entries == 0 and cache.size_bytes == 0


async def test_entry_bound_evicts_least_recently_used() -> None:
    cache = make(ManualClock(), max_entries=2)
    await cache.put("a", b"1", USAGE)
    await cache.put("b", b"2", USAGE)
    assert await cache.get("a") is not None  # a is now the most recent
    await cache.put("c", b"3", USAGE)
    assert await cache.get("b") is None
    assert await cache.get("a") is not None and await cache.get("c") is not None


async def test_byte_bound() -> None:
    cache = make(ManualClock(), max_bytes=10)
    await cache.put("a", b"12345", USAGE)
    await cache.put("b", b"12345", USAGE)
    assert cache.size_bytes == 10
    await cache.put("c", b"123", USAGE)
    assert await cache.get("a") is None
    assert cache.size_bytes == 8
    await cache.put("huge", b"x" * 11, USAGE)  # bigger than the budget: not stored
    assert await cache.get("huge") is None and cache.entries == 2


async def test_overwrite_keeps_byte_count_right() -> None:
    cache = make(ManualClock())
    await cache.put("a", b"12345", USAGE)
    await cache.put("a", b"12", USAGE)
    assert cache.size_bytes == 2 and cache.entries == 1
