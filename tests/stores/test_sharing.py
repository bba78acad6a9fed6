"""What replicas share through one store, with two of everything on one ``MemoryStore`` and a
hand-driven clock: breakers, deferred results and exact-cache entries."""

from __future__ import annotations

import asyncio

from hybrid_gateway.resilience.breaker import BreakerSettings, BreakerState, CircuitBreaker, Outcome
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.results.store import ResultsStore, ResultState
from hybrid_gateway.stores.blobs import ResultsMirror, SharedExactCache
from hybrid_gateway.stores.breakers import BreakerSync
from hybrid_gateway.stores.memory import MemoryStore
from hybrid_gateway.stores.outbox import Outbox
from hybrid_gateway.types import Usage

SETTINGS = BreakerSettings(window_s=30, min_requests=4, error_rate=0.5, open_s=10)


def replica(store: MemoryStore, clock: ManualClock) -> tuple[CircuitBreaker, BreakerSync]:
    sync = BreakerSync(store, SETTINGS)
    breaker = CircuitBreaker("heavy", clock, SETTINGS, [sync])
    sync.bind({"heavy": breaker})
    return breaker, sync


async def test_a_breaker_opened_on_one_replica_opens_on_the_other() -> None:
    clock = ManualClock(100.0)
    store = MemoryStore(clock)
    a, sync_a = replica(store, clock)
    b, sync_b = replica(store, clock)
    for _ in range(4):
        assert a.allow()
        a.record(Outcome.FAILURE)
    assert (a.state, b.state) == (BreakerState.OPEN, BreakerState.CLOSED)
    await sync_a.sync()  # A publishes its open-until
    await sync_b.sync()  # B reads it
    assert b.state == BreakerState.OPEN and not b.allow()
    assert b.retry_after_s() == 10.0
    await clock.advance(10.0)
    assert b.allow()  # half-open: each replica probes on its own afterwards


async def test_failures_split_over_replicas_open_the_shared_breaker() -> None:
    clock = ManualClock(100.0)
    store = MemoryStore(clock)
    a, sync_a = replica(store, clock)
    b, sync_b = replica(store, clock)
    for breaker in (a, b):  # 2 failures each: neither alone reaches min_requests=4
        for _ in range(2):
            breaker.record(Outcome.FAILURE)
    assert (a.state, b.state) == (BreakerState.CLOSED, BreakerState.CLOSED)
    await sync_a.sync()
    await sync_b.sync()  # the shared window holds 4 failures: open
    await sync_a.sync()
    assert (a.state, b.state) == (BreakerState.OPEN, BreakerState.OPEN)


def result_replicas(outbox: Outbox) -> tuple[ResultsStore, ResultsStore]:
    """Two replicas' result stores mirrored into one ``MemoryStore`` through ``outbox``."""
    clock = ManualClock()
    store = MemoryStore(clock)
    a = ResultsStore(clock, ttl_s=60, max_entries=10)
    b = ResultsStore(clock, ttl_s=60, max_entries=10)
    a.share(ResultsMirror(store, outbox, clock, retry_s=1.0))
    b.share(ResultsMirror(store, outbox, clock, retry_s=1.0))
    return a, b


async def test_a_result_recorded_on_one_replica_is_read_on_the_other() -> None:
    outbox = Outbox()
    a, b = result_replicas(outbox)
    a.open("req-1", "acme", "heavy")
    a.finish("req-1", b'{"object": "chat.completion"}')
    await outbox.drain(timeout_s=5)
    entry = await b.lookup("req-1", "acme")
    assert entry is not None and entry.state is ResultState.DONE
    assert entry.body == b'{"object": "chat.completion"}'
    assert await b.lookup("req-1", "other-tenant") is None
    assert await b.lookup("req-unknown", "acme") is None


async def test_an_opened_result_is_on_the_other_replica_once_its_write_completes() -> None:
    outbox = Outbox()
    a, b = result_replicas(outbox)
    written = a.open("req-2", "acme", "heavy")
    assert written is not None
    await written  # no drain: the returned write alone is what a caller waits for
    entry = await b.lookup("req-2", "acme")
    assert entry is not None and entry.state is ResultState.PENDING
    await outbox.drain(timeout_s=5)


async def test_writes_left_when_the_outbox_stops_are_counted_and_release_their_waiters() -> None:
    outbox, gate = Outbox(), asyncio.Event()
    first = outbox.submit(gate.wait)  # the sender is stuck on this one
    second = outbox.submit(gate.wait)
    await outbox.drain(timeout_s=0.01)
    assert first.done() and second.done() and outbox.dropped == 1  # first was cancelled


async def test_exact_cache_entries_are_shared_and_bounded() -> None:
    clock = ManualClock()
    store = MemoryStore(clock)
    a = SharedExactCache(store, ttl_s=60, max_entry_bytes=100, clock=clock, wall=lambda: 5.0)
    b = SharedExactCache(store, ttl_s=60, max_entry_bytes=100, clock=clock, wall=lambda: 7.0)
    await a.put("k", b'{"a": 1}', Usage(3, 4))
    hit = await b.get("k")
    assert hit is not None and hit.body == b'{"a": 1}' and hit.usage == Usage(3, 4)
    assert hit.created_at == clock.now() - 2.0  # age from the wall stamps
    await a.put("big", b"x" * 101, Usage(1, 1))
    assert await b.get("big") is None
    await clock.advance(61)
    assert await b.get("k") is None
