"""The shared store going away: at start (a dead port) and mid-run (our own redis-server,
killed and restarted).  Nothing raises to the caller but a mapped ``GatewayError`` (a replica
asked for another one's deferred result says 503); each function follows its policy; the
store is marked down (errors counted) and up again once Redis answers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hybrid_gateway.errors import Overloaded
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.results.store import ResultsStore, ResultState
from hybrid_gateway.stores.base import BucketSpec, StoreUnavailable
from hybrid_gateway.stores.blobs import ResultsMirror, SharedExactCache
from hybrid_gateway.stores.health import StoreHealth
from hybrid_gateway.stores.limits import SharedRateLimiter
from hybrid_gateway.stores.outbox import Outbox
from hybrid_gateway.stores.redis_store import RedisStore
from hybrid_gateway.stores.spend import SharedBudgetBook
from hybrid_gateway.tenancy.settings import BudgetConfig, RateQuota
from hybrid_gateway.types import Usage
from tests.e2e.stack import closed_port
from tests.stores.redis_server import RedisServer, unique_prefix

WALL = 1_780_000_000.0  # a fixed instant for budget periods


class Events:
    def __init__(self) -> None:
        self.states: list[bool] = []
        self.errors: list[str] = []

    def store_state(self, up: bool) -> None:
        self.states.append(up)

    def store_error(self, op: str) -> None:
        self.errors.append(op)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def redis_store(url: str, clock: ManualClock, events: Events | None = None) -> RedisStore:
    health = StoreHealth(clock, retry_s=1.0, listeners=[events] if events else [])
    return RedisStore(url, prefix=unique_prefix(), timeout_s=0.5, health=health)


@pytest.fixture
async def dead(clock: ManualClock) -> AsyncIterator[RedisStore]:
    store = redis_store(f"redis://127.0.0.1:{closed_port()}/0", clock)
    yield store
    await store.aclose()


async def test_a_dead_store_fails_once_then_fails_fast_until_retry(
    clock: ManualClock,
) -> None:
    events = Events()
    store = redis_store(f"redis://127.0.0.1:{closed_port()}/0", clock, events)
    with pytest.raises(StoreUnavailable):
        await store.get("k")
    assert events.states == [False] and events.errors == ["get"]
    with pytest.raises(StoreUnavailable):  # no connection attempt: no second error counted
        await store.get("k")
    assert events.errors == ["get"]
    await clock.advance(1.0)
    with pytest.raises(StoreUnavailable):  # one try after retry_s
        await store.ping()
    assert events.errors == ["get", "ping"]
    await store.aclose()


@pytest.mark.parametrize("policy", ["open", "closed"])
async def test_rate_limits_follow_their_outage_policy(dead: RedisStore, policy: str) -> None:
    limiter = SharedRateLimiter(
        {"acme": RateQuota(requests_per_s=1)}, None, dead, Outbox(),
        fail_open=policy == "open", retry_s=2.0,
    )  # fmt: skip
    decision = await limiter.admit("acme", 0)
    assert decision.allowed is (policy == "open")
    if policy == "closed":
        assert decision.retry_after_s == 2.0 and decision.limit == "store:unavailable"
    assert (await limiter.admit("unlimited-tenant", 0)).allowed  # no quota: never asks


async def test_the_exact_cache_is_bypassed(dead: RedisStore, clock: ManualClock) -> None:
    cache = SharedExactCache(dead, ttl_s=60, max_entry_bytes=1000, clock=clock)
    await cache.put("k", b"{}", Usage(1, 1))  # dropped, no error
    assert await cache.get("k") is None


async def test_results_stay_on_their_replica_and_others_say_503_not_404(
    dead: RedisStore, clock: ManualClock
) -> None:
    outbox = Outbox()
    owner = ResultsStore(clock, ttl_s=60, max_entries=10)
    other = ResultsStore(clock, ttl_s=60, max_entries=10)
    for replica in (owner, other):
        replica.share(ResultsMirror(dead, outbox, clock, retry_s=1.0))
    written = owner.open("req-1", "acme", "heavy")
    assert written is not None
    await written  # tried and dropped: no error reaches the request
    entry = await owner.lookup("req-1", "acme")
    assert entry is not None and entry.state is ResultState.PENDING
    with pytest.raises(Overloaded) as raised:  # the other replica cannot tell: it says so
        await other.lookup("req-1", "acme")
    assert raised.value.status == 503 and raised.value.code == "store_unavailable"
    assert raised.value.retry_after_s == 1.0
    assert outbox.dropped == 1
    await outbox.drain(timeout_s=1)


async def test_budget_debits_made_during_an_outage_are_sent_once_when_redis_returns(
    redis_server: RedisServer, clock: ManualClock
) -> None:
    store = redis_store(redis_server.url, clock)
    book = SharedBudgetBook({"acme": BudgetConfig(daily=1.0)}, store, lambda: WALL)
    book.debit("acme", 0.25, WALL, "req-1")
    await book.sync()
    assert book.queued == 0
    redis_server.stop()
    book.debit("acme", 0.5, WALL, "req-2")
    book.debit("acme", 0.5, WALL, "req-3")
    await book.sync()  # down: queued, and the local view still counts them
    assert book.queued == 2 and not store.health.up
    assert book.spent("acme", WALL)[0] == pytest.approx(1.25)
    assert book.exceeded("acme", WALL) == "daily"
    redis_server.start()  # empty (no persistence): the counter restarts from what is sent
    await clock.advance(1.0)
    await book.sync()
    assert book.queued == 0 and store.health.up
    assert book.spent("acme", WALL)[0] == pytest.approx(1.0)  # reconciled with Redis
    book.debit("acme", 0.5, WALL, "req-2")  # the same request again: counted once in Redis
    await book.sync()
    assert book.spent("acme", WALL)[0] == pytest.approx(1.0)
    await store.aclose()


async def test_mid_run_stop_and_recovery(redis_server: RedisServer, clock: ManualClock) -> None:
    events = Events()
    store = redis_store(redis_server.url, clock, events)
    spec = BucketSpec("rate:x", 1.0, 5.0, 1.0)
    assert await store.take([spec]) == (0.0, -1)
    redis_server.stop()
    limiter = SharedRateLimiter(
        {"x": RateQuota(requests_per_s=1, burst=5)}, None, store, Outbox(),
        fail_open=True, retry_s=1.0,
    )  # fmt: skip
    assert (await limiter.admit("x", 0)).allowed  # fail open
    assert events.states == [False]
    redis_server.start()
    await clock.advance(1.0)
    await store.ping()
    assert events.states == [False, True] and store.health.up
    assert await store.take([spec]) == (0.0, -1)
    await store.aclose()
