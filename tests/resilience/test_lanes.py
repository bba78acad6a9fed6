"""Lane gates: slots, FIFO hand-over, bounded queue and queue deadline on an injected clock."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import pytest

from hybrid_gateway.errors import Overloaded, UpstreamUnavailable
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.resilience.dispatch import Dispatcher, DispatchParts, LaneChannels
from hybrid_gateway.resilience.lanes import LaneGate, LaneGates
from hybrid_gateway.resilience.retry import RetryBudget, RetryPolicy
from hybrid_gateway.resilience.settings import LaneQueueConfig
from hybrid_gateway.types import RequestRecord, RouteDecision


def gate(
    clock: ManualClock, *, slots: int = 1, waiting: int = 2, timeout_s: float = 5.0
) -> LaneGate:
    limits = LaneQueueConfig(max_concurrency=slots, max_waiting=waiting, timeout_s=timeout_s)
    return LaneGate("heavy", "ch", limits, clock)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_free_slots_are_taken_without_waiting() -> None:
    g = gate(ManualClock(), slots=2)
    assert await g.acquire() == 0.0
    assert await g.acquire() == 0.0
    assert (g.active, g.waiting) == (2, 0)
    g.release()
    g.release()
    assert g.active == 0


async def test_a_released_slot_goes_to_the_longest_waiter_and_the_wait_is_measured() -> None:
    clock = ManualClock()
    g = gate(clock)
    await g.acquire()
    first = asyncio.ensure_future(g.acquire())
    await settle()
    second = asyncio.ensure_future(g.acquire())
    await settle()
    assert g.waiting == 2
    await clock.advance(1.5)
    g.release()
    await settle()
    assert first.done() and not second.done()
    assert first.result() == pytest.approx(1.5)
    assert (g.active, g.waiting) == (1, 1)
    g.release()
    await settle()
    assert second.done()


async def test_a_full_queue_refuses_at_once_with_retry_after() -> None:
    clock = ManualClock()
    g = gate(clock, waiting=1)
    await g.acquire()
    waiter = asyncio.ensure_future(g.acquire())
    await settle()
    with pytest.raises(Overloaded) as info:
        await g.acquire()
    assert info.value.code == "lane_queue_full"
    assert info.value.status == 503 and info.value.retry_after_s == 1.0
    assert g.rejected == {"lane_queue_full": 1}
    waiter.cancel()


async def test_the_queue_deadline_refuses_a_waiter_and_frees_its_place() -> None:
    clock = ManualClock()
    g = gate(clock, timeout_s=2.0)
    await g.acquire()
    waiter = asyncio.ensure_future(g.acquire())
    await settle()
    await clock.advance(1.9)
    assert not waiter.done()
    await clock.advance(0.2)
    assert waiter.done()
    with pytest.raises(Overloaded) as info:
        waiter.result()
    assert info.value.code == "lane_queue_timeout"
    assert g.waiting == 0 and g.active == 1
    g.release()
    assert g.active == 0  # the timed-out waiter never held the slot


async def test_a_cancelled_waiter_leaves_the_queue_and_never_leaks_a_slot() -> None:
    clock = ManualClock()
    g = gate(clock)
    await g.acquire()
    waiter = asyncio.ensure_future(g.acquire())
    await settle()
    waiter.cancel()
    await settle()
    assert g.waiting == 0
    g.release()
    assert g.active == 0


async def test_a_slot_handed_over_as_the_waiter_is_cancelled_is_given_back() -> None:
    clock = ManualClock()
    g = gate(clock)
    await g.acquire()
    waiter = asyncio.ensure_future(g.acquire())
    await settle()
    g.release()  # hands the slot to the waiter ...
    waiter.cancel()  # ... which is cancelled before it runs
    await settle()
    assert waiter.cancelled()
    assert (g.active, g.waiting) == (0, 0)


class SlowChannel:
    def __init__(self, name: str) -> None:
        self.name = name
        self.release = asyncio.Event()

    async def complete(self, body: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]]:
        await self.release.wait()
        return b"{}", {"choices": []}

    @asynccontextmanager
    async def open_stream(self, body: Mapping[str, Any]) -> AsyncIterator[AsyncIterator[bytes]]:
        async def events() -> AsyncIterator[bytes]:
            yield b"one"

        yield events()


def record(lane: str) -> RequestRecord:
    rec = RequestRecord(request_id=f"req_{lane}", started_at=0.0)
    rec.route = RouteDecision(lane, "shared", "test")
    return rec


async def test_lanes_sharing_a_channel_have_their_own_slots() -> None:
    """A heavy lane at its limit on a shared channel does not make a light request wait."""
    clock = ManualClock()
    shared = SlowChannel("shared")
    limits = LaneQueueConfig(max_concurrency=1, max_waiting=4, timeout_s=5)
    gates = LaneGates.build({"heavy": (limits, ("shared",)), "light": (limits, ("shared",))}, clock)
    parts = DispatchParts(
        lanes={"heavy": LaneChannels(shared), "light": LaneChannels(shared)},
        clock=clock,
        budget=RetryBudget(clock),
        gates=gates,
    )
    dispatcher = Dispatcher(parts)
    heavy = [record("heavy") for _ in range(3)]
    running = [asyncio.ensure_future(dispatcher.complete(r, {})) for r in heavy]
    await settle()
    heavy_gate = gates.get("heavy", "shared")
    assert heavy_gate is not None and (heavy_gate.active, heavy_gate.waiting) == (1, 2)
    async with dispatcher.open_stream(record("light"), {}) as (_, payloads):
        assert [p async for p in payloads] == [b"one"]  # no wait behind the heavy queue
    light_gate = gates.get("light", "shared")
    assert light_gate is not None and light_gate.active == 0
    await clock.advance(0.25)
    shared.release.set()
    await asyncio.gather(*running)
    assert heavy[0].extra["queue_ms"] == 0.0
    assert heavy[1].extra["queue_ms"] == pytest.approx(250.0)
    assert heavy_gate.active == 0


class FailingChannel(SlowChannel):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.calls = 0

    async def complete(self, body: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]]:
        self.calls += 1
        raise UpstreamUnavailable("503", channel=self.name, code="upstream_status_503")


async def test_retry_on_backup_fails_over_at_once_without_spending_the_budget() -> None:
    clock = ManualClock()
    primary, backup = FailingChannel("primary"), SlowChannel("backup")
    backup.release.set()
    budget = RetryBudget(clock, ratio=0.0, min_per_s=0.0)  # no budget at all
    parts = DispatchParts(
        lanes={"heavy": LaneChannels(primary, backup, retry_on_backup=True)},
        clock=clock,
        budget=budget,
        policy=RetryPolicy(random.Random(1)),
    )
    rec = record("heavy")
    channel, _ = await Dispatcher(parts).complete(rec, {})
    assert channel is backup and primary.calls == 1
    assert (rec.fallback, rec.retries) == ("failover", 1)
    assert rec.route is not None and rec.route.channel == "backup"
    without = DispatchParts(
        lanes={"heavy": LaneChannels(primary, backup)}, clock=clock, budget=budget,
        policy=RetryPolicy(random.Random(1)),
    )  # fmt: skip
    with pytest.raises(UpstreamUnavailable):  # the old behaviour: a retry needs the budget
        await Dispatcher(without).complete(record("heavy"), {})
