"""What the dispatcher reports to a channel's breaker: streams when they end, and only outcomes
of attempts let through in the breaker's current state."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import pytest

from hybrid_gateway.errors import GatewayError, UpstreamTimeout, UpstreamUnavailable
from hybrid_gateway.resilience.breaker import (
    BreakerSettings,
    BreakerState,
    CircuitBreaker,
    Outcome,
)
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.resilience.dispatch import Dispatcher, DispatchParts, LaneChannels
from hybrid_gateway.resilience.retry import RetryBudget
from hybrid_gateway.types import RequestRecord, RouteDecision

DONE = b"[DONE]"


class ScriptedChannel:
    """Streams ``payloads`` then raises ``end`` (if any); ``complete`` waits for ``release``."""

    def __init__(self, *payloads: bytes, end: GatewayError | None = None) -> None:
        self.name = "a"
        self.payloads, self.end = payloads, end
        self.started, self.release = asyncio.Event(), asyncio.Event()

    async def complete(self, body: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]]:
        self.started.set()
        await self.release.wait()
        return b"{}", {"choices": []}

    @asynccontextmanager
    async def open_stream(self, body: Mapping[str, Any]) -> AsyncIterator[AsyncIterator[bytes]]:
        async def events() -> AsyncIterator[bytes]:
            for payload in self.payloads:
                yield payload
            if self.end is not None:
                raise self.end

        yield events()


def setup_for(channel: ScriptedChannel) -> tuple[Dispatcher, CircuitBreaker, ManualClock]:
    clock = ManualClock()
    breaker = CircuitBreaker("a", clock, BreakerSettings(min_requests=2, open_s=30.0))
    parts = DispatchParts(
        lanes={"heavy": LaneChannels(channel)},
        clock=clock,
        budget=RetryBudget(clock, ratio=0.1, min_per_s=1.0),
        breakers={"a": breaker},
    )
    return Dispatcher(parts), breaker, clock


def record() -> RequestRecord:
    rec = RequestRecord(request_id="req_1", started_at=0.0)
    rec.route = RouteDecision("heavy", "a", "test")
    return rec


def state(breaker: CircuitBreaker) -> BreakerState:
    """Read the state through a call, so mypy does not keep an earlier narrowing across time."""
    return breaker.state


async def half_open(breaker: CircuitBreaker, clock: ManualClock) -> None:
    for _ in range(2):
        breaker.record(Outcome.FAILURE)  # as closed-state admissions would
    await clock.advance(30.0)
    assert state(breaker) is BreakerState.HALF_OPEN


@pytest.mark.parametrize(
    "end",
    [
        UpstreamUnavailable("reset", channel="a", code="upstream_stream_broken"),
        UpstreamTimeout("stalled mid-stream", channel="a"),
    ],
    ids=["reset", "stall"],
)
async def test_streams_breaking_midway_open_the_breaker(end: GatewayError) -> None:
    channel = ScriptedChannel(b"one", end=end)
    dispatcher, breaker, _ = setup_for(channel)
    for _ in range(2):
        with pytest.raises(type(end)):
            async with dispatcher.open_stream(record(), {}) as (_, payloads):
                assert [p async for p in payloads] == [b"one"]
    assert state(breaker) is BreakerState.OPEN


async def test_a_probe_stream_closes_the_breaker_at_its_first_payload_not_when_open() -> None:
    """Not at [DONE]: with one probe slot, every other request of a lane without a backup
    would get a 503 for as long as the probe's answer runs."""
    dispatcher, breaker, clock = setup_for(ScriptedChannel(b"one", b"two", DONE))
    await half_open(breaker, clock)
    async with dispatcher.open_stream(record(), {}) as (_, payloads):
        assert state(breaker) is BreakerState.HALF_OPEN  # open is not yet a success
        assert await anext(payloads) == b"one"
        assert state(breaker) is BreakerState.CLOSED


async def test_a_probe_stream_that_breaks_before_answering_reopens_the_breaker() -> None:
    end = UpstreamUnavailable("reset", channel="a", code="upstream_stream_broken")
    dispatcher, breaker, clock = setup_for(ScriptedChannel(end=end))
    await half_open(breaker, clock)
    with pytest.raises(UpstreamUnavailable):
        async with dispatcher.open_stream(record(), {}) as (_, payloads):
            await anext(payloads)
    assert state(breaker) is BreakerState.OPEN


async def test_a_client_leaving_before_the_probe_answers_frees_it_and_counts_nothing() -> None:
    dispatcher, breaker, clock = setup_for(ScriptedChannel(b"one", b"two", DONE))
    await half_open(breaker, clock)
    async with dispatcher.open_stream(record(), {}):
        pass  # the client went away before the first payload
    assert state(breaker) is BreakerState.HALF_OPEN
    assert breaker.allow()  # the slot is free for the next probe


async def test_a_request_let_through_before_the_breaker_opened_does_not_close_it() -> None:
    channel = ScriptedChannel()
    dispatcher, breaker, clock = setup_for(channel)
    slow = asyncio.ensure_future(dispatcher.complete(record(), {}))  # let through while closed
    await channel.started.wait()
    await half_open(breaker, clock)
    assert breaker.allow()  # the probe, still running
    channel.release.set()
    await slow
    assert state(breaker) is BreakerState.HALF_OPEN  # the old success decides nothing
    assert not breaker.allow()  # and the probe's slot is still taken
