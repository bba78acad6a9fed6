"""One contract for every ``KVStore``: the in-process store and the Redis store.

The Redis store keeps time by Redis ``TIME`` and the memory store by the injected clock, so
the timing cases are written so that both hold: the memory store's clock is advanced by hand,
the Redis store is given buckets slow enough that test runtime cannot refill them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.stores.base import BucketSpec, KVStore, SpendKey
from hybrid_gateway.stores.health import StoreHealth
from hybrid_gateway.stores.memory import MemoryStore
from hybrid_gateway.stores.redis_store import RedisStore
from tests.stores.redis_server import RedisServer


@dataclass
class Subject:
    store: KVStore
    clock: ManualClock | None  # None: Redis keeps its own time


@pytest.fixture(params=["memory", "redis"])
async def subject(request: pytest.FixtureRequest) -> AsyncIterator[Subject]:
    clock = ManualClock(1000.0)
    if request.param == "memory":
        yield Subject(MemoryStore(clock), clock)
        return
    redis_server: RedisServer = request.getfixturevalue("redis_server")
    health = StoreHealth(clock, retry_s=1.0)
    store = RedisStore(redis_server.url, prefix="contract:", timeout_s=2.0, health=health)
    try:
        yield Subject(store, None)
    finally:
        await store.aclose()


def bucket(key: str, amount: float = 1, rate: float = 0.001, capacity: float = 2) -> BucketSpec:
    return BucketSpec(key, rate, capacity, amount)


async def test_take_debits_until_empty_then_reports_the_wait(subject: Subject) -> None:
    store = subject.store
    assert await store.take([bucket("b")]) == (0.0, -1)
    assert await store.take([bucket("b")]) == (0.0, -1)
    wait, worst = await store.take([bucket("b")])
    assert worst == 0
    assert wait == pytest.approx(1000.0, rel=0.01)  # one token at 0.001/s


async def test_take_is_all_or_nothing_across_buckets(subject: Subject) -> None:
    store = subject.store
    assert await store.take([bucket("small", capacity=1)]) == (0.0, -1)
    wait, worst = await store.take([bucket("big", capacity=5), bucket("small", capacity=1)])
    assert worst == 1 and wait > 0
    # "big" was not debited by the refused take: its 5 tokens are all still there
    assert await store.take([bucket("big", amount=5, capacity=5)]) == (0.0, -1)


async def test_forced_take_runs_into_debt_and_gives_back_no_more_than_capacity(
    subject: Subject,
) -> None:
    store = subject.store
    assert await store.take([bucket("t", amount=5, capacity=2)], force=True) == (0.0, -1)
    wait, _ = await store.take([bucket("t", capacity=2)])
    assert wait == pytest.approx(4 / 0.001, rel=0.01)  # level -3: 4 tokens short of 1
    await store.take([bucket("t", amount=-100, capacity=2)], force=True)
    assert await store.take([bucket("t", amount=2, capacity=2)]) == (0.0, -1)
    assert (await store.take([bucket("t", capacity=2)]))[0] > 0


async def test_a_request_larger_than_the_bucket_passes_once_it_is_full(subject: Subject) -> None:
    assert await subject.store.take([bucket("x", amount=10, capacity=2)]) == (0.0, -1)


async def test_buckets_refill_with_time() -> None:
    clock = ManualClock()
    store = MemoryStore(clock)  # Redis refills by its TIME: covered by the e2e rate test
    spec = BucketSpec("r", 10.0, 1.0, 1.0)
    assert await store.take([spec]) == (0.0, -1)
    assert (await store.take([spec]))[0] == pytest.approx(0.1)
    await clock.advance(0.1)
    assert await store.take([spec]) == (0.0, -1)


async def test_spend_adds_and_an_idempotency_key_counts_once(subject: Subject) -> None:
    store = subject.store
    keys = [SpendKey("day", 60), SpendKey("month", 60)]
    assert await store.add_spend(keys, 1.5) == (1.5, 1.5)
    once = SpendKey("once:req1", 60)
    assert await store.add_spend(keys, 0.25, once) == (1.75, 1.75)
    assert await store.add_spend(keys, 0.25, once) == (1.75, 1.75)
    assert await store.read_spend(["day", "month", "other"]) == (1.75, 1.75, 0.0)


async def test_blobs_round_trip_and_expire(subject: Subject) -> None:
    store = subject.store
    assert await store.get("k") is None
    await store.set("k", b"\x00body", ttl_s=0.2)
    assert await store.get("k") == b"\x00body"
    if subject.clock is not None:
        await subject.clock.advance(0.3)
    else:
        import asyncio

        await asyncio.sleep(0.35)  # Redis expiry runs on Redis's clock
    assert await store.get("k") is None


async def test_breaker_window_opens_at_the_error_rate(subject: Subject) -> None:
    store = subject.store
    kw = {"window_s": 30.0, "min_requests": 10, "error_rate": 0.5, "open_s": 60.0}
    assert (await store.breaker_report("ch", 5, 0, **kw)).open_for_s == 0  # type: ignore[arg-type]
    assert (await store.breaker_report("ch", 0, 4, **kw)).open_for_s == 0  # type: ignore[arg-type]
    # another replica's failures tip the shared window: 5 ok, 5 failed out of 10
    verdict = await store.breaker_report("ch", 0, 1, **kw)  # type: ignore[arg-type]
    assert verdict.open_for_s == pytest.approx(60.0, abs=1)
    later = await store.breaker_report("ch", 0, 0, **kw)  # type: ignore[arg-type]
    assert 50 < later.open_for_s <= 60


async def test_breaker_open_is_seen_by_the_next_report(subject: Subject) -> None:
    store = subject.store
    kw = {"window_s": 30.0, "min_requests": 10, "error_rate": 0.5, "open_s": 60.0}
    await store.breaker_open("ch2", 20.0)
    verdict = await store.breaker_report("ch2", 1, 0, **kw)  # type: ignore[arg-type]
    assert 15 < verdict.open_for_s <= 20


async def test_ping(subject: Subject) -> None:
    await subject.store.ping()
