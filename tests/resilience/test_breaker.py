from __future__ import annotations

from hybrid_gateway.resilience.breaker import (
    BreakerSettings,
    BreakerState,
    CircuitBreaker,
    Outcome,
)
from hybrid_gateway.resilience.clock import ManualClock


class Transitions:
    def __init__(self) -> None:
        self.seen: list[tuple[str, BreakerState, BreakerState]] = []

    def state_change(self, channel: str, old: BreakerState, new: BreakerState) -> None:
        self.seen.append((channel, old, new))


def make(probes: int = 1) -> tuple[CircuitBreaker, ManualClock, Transitions]:
    clock = ManualClock(start=1000.0)
    listener = Transitions()
    settings = BreakerSettings(half_open_probes=probes)
    return CircuitBreaker("heavy-a", clock, settings, [listener]), clock, listener


def state(breaker: CircuitBreaker) -> BreakerState:
    """Read the state through a call, so mypy does not keep an earlier narrowing across time."""
    return breaker.state


def feed(breaker: CircuitBreaker, ok: int, failed: int) -> None:
    for _ in range(ok):
        assert breaker.allow()
        breaker.record(Outcome.SUCCESS)
    for _ in range(failed):
        assert breaker.allow()
        breaker.record(Outcome.FAILURE)


def test_stays_closed_under_min_requests() -> None:
    breaker, _, listener = make()
    feed(breaker, 0, 19)  # all failures, but fewer than min_requests
    assert breaker.state is BreakerState.CLOSED
    assert listener.seen == []


def test_stays_closed_below_the_error_rate() -> None:
    breaker, _, _ = make()
    feed(breaker, 17, 3)  # 15 %
    assert breaker.state is BreakerState.CLOSED


def test_opens_at_twenty_percent_and_rejects() -> None:
    breaker, _, listener = make()
    feed(breaker, 16, 4)  # 20 % of 20
    assert breaker.state is BreakerState.OPEN
    assert not breaker.allow()
    assert breaker.retry_after_s() == 30.0
    assert listener.seen == [("heavy-a", BreakerState.CLOSED, BreakerState.OPEN)]


async def test_old_failures_leave_the_window() -> None:
    breaker, clock, _ = make()
    feed(breaker, 0, 10)
    await clock.advance(31.0)
    feed(breaker, 10, 0)  # the 10 failures are out of the 30 s window
    feed(breaker, 8, 2)
    assert breaker.state is BreakerState.CLOSED


async def test_half_open_after_open_s_then_probe_success_closes() -> None:
    breaker, clock, listener = make()
    feed(breaker, 0, 20)
    await clock.advance(29.9)
    assert breaker.state is BreakerState.OPEN
    assert 0 < breaker.retry_after_s() < 0.2
    await clock.advance(0.1)
    assert state(breaker) is BreakerState.HALF_OPEN
    assert breaker.allow()  # the one probe
    assert not breaker.allow()  # no second request while it runs
    breaker.record(Outcome.SUCCESS)
    assert state(breaker) is BreakerState.CLOSED
    assert breaker.allow()
    assert [new for _, _, new in listener.seen] == [
        BreakerState.OPEN,
        BreakerState.HALF_OPEN,
        BreakerState.CLOSED,
    ]


async def test_probe_failure_reopens_for_another_open_s() -> None:
    breaker, clock, listener = make(probes=2)
    feed(breaker, 0, 20)
    await clock.advance(30.0)
    assert breaker.allow() and breaker.allow()
    assert not breaker.allow()
    breaker.record(Outcome.FAILURE)
    assert breaker.state is BreakerState.OPEN
    assert breaker.retry_after_s() == 30.0
    assert [(old, new) for _, old, new in listener.seen] == [
        (BreakerState.CLOSED, BreakerState.OPEN),
        (BreakerState.OPEN, BreakerState.HALF_OPEN),
        (BreakerState.HALF_OPEN, BreakerState.OPEN),
    ]


async def test_ignored_outcome_frees_the_probe_slot() -> None:
    breaker, clock, _ = make()
    feed(breaker, 0, 20)
    await clock.advance(30.0)
    assert breaker.allow()
    breaker.record(Outcome.IGNORED)
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.allow()
