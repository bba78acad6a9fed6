from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import pytest

from hybrid_gateway.errors import CircuitOpen, GatewayError, UpstreamUnavailable
from hybrid_gateway.resilience.breaker import BreakerSettings, BreakerState, CircuitBreaker
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.resilience.dispatch import Dispatcher, DispatchParts, LaneChannels
from hybrid_gateway.resilience.retry import RetryBudget, RetryPolicy
from hybrid_gateway.types import RequestRecord, RouteDecision
from hybrid_gateway.upstreams.openai_http import UpstreamRejected


class FakeChannel:
    """Fails with the queued errors, then answers."""

    def __init__(self, name: str, *errors: GatewayError) -> None:
        self.name = name
        self.errors = list(errors)
        self.calls = 0

    def _next(self) -> None:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)

    async def complete(self, body: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]]:
        self._next()
        return b"{}", {"choices": []}

    @asynccontextmanager
    async def open_stream(self, body: Mapping[str, Any]) -> AsyncIterator[AsyncIterator[bytes]]:
        self._next()

        async def events() -> AsyncIterator[bytes]:
            yield b"one"

        yield events()


def bad_gateway(name: str) -> UpstreamUnavailable:
    return UpstreamUnavailable("502", channel=name, code="upstream_status_502")


def setup(
    primary: FakeChannel, backup: FakeChannel | None = None, *, min_requests: int = 20
) -> tuple[Dispatcher, ManualClock, dict[str, CircuitBreaker]]:
    clock = ManualClock()
    settings = BreakerSettings(min_requests=min_requests)
    names = [primary.name] + ([backup.name] if backup else [])
    breakers = {n: CircuitBreaker(n, clock, settings) for n in names}
    parts = DispatchParts(
        lanes={"heavy": LaneChannels(primary, backup)},
        clock=clock,
        budget=RetryBudget(clock, ratio=0.1, min_per_s=1.0),
        policy=RetryPolicy(random.Random(1)),
        breakers=breakers,
    )
    return Dispatcher(parts), clock, breakers


def record(channel: str = "a") -> RequestRecord:
    rec = RequestRecord(request_id="req_1", started_at=0.0)
    rec.route = RouteDecision("heavy", channel, "test")
    return rec


async def drive(clock: ManualClock, coro: Any) -> Any:
    task = asyncio.ensure_future(coro)
    while not task.done():
        await clock.advance(0.5)
    return task.result()


async def test_retries_until_success_with_clock_sleeps() -> None:
    primary = FakeChannel("a", bad_gateway("a"), bad_gateway("a"))
    dispatcher, clock, _ = setup(primary)
    rec = record()
    channel, _ = await drive(clock, dispatcher.complete(rec, {}))
    assert channel is primary and primary.calls == 3
    assert rec.retries == 2 and rec.extra["breaker"] == "a=closed"
    assert clock.now() >= 0.2 * 0.8 + 0.5 * 0.8


async def test_a_retry_keeps_a_fallback_made_before_dispatch() -> None:
    """A budget downgrade marks the record before dispatch; retries on the primary keep it."""
    primary = FakeChannel("a", bad_gateway("a"))
    dispatcher, clock, _ = setup(primary)
    rec = record()
    rec.fallback = "budget"
    await drive(clock, dispatcher.complete(rec, {}))
    assert rec.retries == 1 and rec.fallback == "budget"


async def test_back_on_the_primary_clears_the_dispatchers_own_mark() -> None:
    primary = FakeChannel("a", bad_gateway("a"))
    dispatcher, clock, _ = setup(primary)
    rec = record()
    rec.fallback = "breaker"  # as an earlier attempt on the backup would have left it
    await drive(clock, dispatcher.complete(rec, {}))
    assert rec.fallback is None


async def test_gives_up_after_the_schedule_and_raises_the_last_error() -> None:
    primary = FakeChannel("a", *(bad_gateway("a") for _ in range(9)))
    dispatcher, clock, _ = setup(primary)
    rec = record()
    with pytest.raises(UpstreamUnavailable):
        await drive(clock, dispatcher.complete(rec, {}))
    assert primary.calls == 4 and rec.retries == 3


class SlowFailingChannel(FakeChannel):
    """Each attempt takes ``seconds`` of (manual) clock time, then fails."""

    def __init__(self, name: str, clock: ManualClock, seconds: float) -> None:
        super().__init__(name)
        self.clock, self.seconds = clock, seconds

    async def complete(self, body: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]]:
        self.calls += 1
        await self.clock.sleep(self.seconds)
        raise bad_gateway(self.name)


async def test_no_retry_starts_after_max_elapsed() -> None:
    clock = ManualClock()
    slow = SlowFailingChannel("a", clock, seconds=6.0)
    parts = DispatchParts(
        lanes={"heavy": LaneChannels(slow)}, clock=clock,
        budget=RetryBudget(clock, ratio=1.0, min_per_s=10.0),
        policy=RetryPolicy(random.Random(1)), max_elapsed_s=10.0,
    )  # fmt: skip
    rec = record()
    with pytest.raises(UpstreamUnavailable):
        await drive(clock, Dispatcher(parts).complete(rec, {}))
    # attempt 1 fails at 6 s and is retried (6.2 s < 10 s); attempt 2 fails at ~12 s: too late
    assert slow.calls == 2 and rec.retries == 1


async def test_never_retries_a_rejected_request() -> None:
    primary = FakeChannel("a", UpstreamRejected("bad"))
    dispatcher, _, _ = setup(primary)
    rec = record()
    with pytest.raises(UpstreamRejected):
        await dispatcher.complete(rec, {})
    assert primary.calls == 1 and rec.retries == 0


async def test_open_breaker_sends_traffic_to_the_backup() -> None:
    primary, backup = FakeChannel("a", *(bad_gateway("a") for _ in range(9))), FakeChannel("b")
    dispatcher, clock, breakers = setup(primary, backup, min_requests=2)
    rec = record()
    channel, _ = await drive(clock, dispatcher.complete(rec, {}))
    # two failures open the primary's breaker; the retry goes to the backup
    assert channel is backup and primary.calls == 2
    assert breakers["a"].state is BreakerState.OPEN
    assert rec.fallback == "breaker" and rec.route is not None and rec.route.channel == "b"
    assert rec.extra["breaker"] == "b=closed"


async def test_open_breaker_without_backup_is_circuit_open() -> None:
    primary = FakeChannel("a", *(bad_gateway("a") for _ in range(9)))
    dispatcher, clock, _ = setup(primary, min_requests=2)
    with pytest.raises(CircuitOpen) as info:
        await drive(clock, dispatcher.complete(record(), {}))
    assert info.value.status == 503 and info.value.code == "circuit_open"
    assert 29 <= info.value.retry_after_s <= 30


async def test_a_stream_is_retried_only_while_opening() -> None:
    primary = FakeChannel("a", bad_gateway("a"))
    dispatcher, clock, _ = setup(primary)
    rec = record()

    async def consume() -> list[bytes]:
        async with dispatcher.open_stream(rec, {}) as (_, payloads):
            return [p async for p in payloads]

    assert await drive(clock, consume()) == [b"one"]
    assert primary.calls == 2 and rec.retries == 1
