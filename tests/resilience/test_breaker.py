from __future__ import annotations

import math
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid_gateway.resilience.breaker import (
    Admission,
    BreakerSettings,
    BreakerState,
    Caller,
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
        breaker.record(Outcome.SUCCESS, admit(breaker))
    for _ in range(failed):
        breaker.record(Outcome.FAILURE, admit(breaker))


def admit(breaker: CircuitBreaker) -> Admission:
    admission = breaker.allow()
    assert admission is not None
    return admission


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
    probe = admit(breaker)  # the one probe
    assert not breaker.allow()  # no second request while it runs
    breaker.record(Outcome.SUCCESS, probe)
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
    probe, _ = admit(breaker), admit(breaker)
    assert not breaker.allow()
    breaker.record(Outcome.FAILURE, probe)
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
    breaker.record(Outcome.IGNORED, admit(breaker))
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.allow()


async def tripped_with_stale(breaker: CircuitBreaker, clock: ManualClock) -> list[Admission]:
    """Ten requests let through while closed, still running as failures open the breaker
    and it turns half-open."""
    stale = [admit(breaker) for _ in range(10)]
    feed(breaker, 0, 20)
    await clock.advance(30.0)
    assert state(breaker) is BreakerState.HALF_OPEN
    return stale


async def test_a_stale_success_does_not_close_while_the_probe_runs() -> None:
    breaker, clock, _ = make()
    stale = await tripped_with_stale(breaker, clock)
    probe = admit(breaker)
    breaker.record(Outcome.SUCCESS, stale[0])  # let through long before: says nothing now
    assert state(breaker) is BreakerState.HALF_OPEN
    breaker.record(Outcome.SUCCESS, probe)
    assert state(breaker) is BreakerState.CLOSED


async def test_a_stale_failure_does_not_reopen() -> None:
    breaker, clock, _ = make()
    stale = await tripped_with_stale(breaker, clock)
    probe = admit(breaker)
    breaker.record(Outcome.FAILURE, stale[0])
    assert state(breaker) is BreakerState.HALF_OPEN
    breaker.record(Outcome.SUCCESS, probe)
    assert state(breaker) is BreakerState.CLOSED
    for old in stale[1:]:  # and once closed again, the old failures do not count either
        breaker.record(Outcome.FAILURE, old)
    feed(breaker, 0, 11)
    assert state(breaker) is BreakerState.CLOSED  # 11 failures < min_requests (20 with them)


async def test_a_stale_cancellation_frees_no_probe_slot() -> None:
    breaker, clock, _ = make()
    stale = await tripped_with_stale(breaker, clock)
    assert breaker.allow()  # the probe, still running
    breaker.record(Outcome.IGNORED, stale[0])
    assert not breaker.allow()  # no second probe


async def test_a_probe_outcome_after_the_breaker_moved_on_is_stale() -> None:
    breaker, clock, _ = make(probes=2)
    feed(breaker, 0, 20)
    await clock.advance(30.0)
    first, second = admit(breaker), admit(breaker)
    breaker.record(Outcome.FAILURE, first)  # re-opens
    breaker.record(Outcome.SUCCESS, second)  # the other probe of that half-open: too late
    assert state(breaker) is BreakerState.OPEN


async def test_an_outcome_without_admission_counts_only_while_closed() -> None:
    breaker, clock, _ = make()
    feed(breaker, 0, 20)
    await clock.advance(30.0)
    assert admit(breaker).probe
    breaker.record(Outcome.SUCCESS)  # not the probe's
    assert state(breaker) is BreakerState.HALF_OPEN


class _Stepped:
    """A synchronous clock for the property test: the test moves ``at``."""

    at = 1000.0

    def now(self) -> float:
        return self.at

    async def sleep(self, seconds: float) -> None:
        raise AssertionError("the breaker never sleeps")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.1, 0.4, 1.0, 2.9, 7.0]),  # gaps: a window holds 4-300
            st.sampled_from(["ok"] * 7 + ["fail", "suspect", "suspect"]),  # near 20 % failing
            st.sampled_from(["tenant-a"] * 4 + ["tenant-b"]),
        ),
        min_size=20,
        max_size=150,
    )
)
def test_the_window_opens_exactly_where_a_recount_says(
    events: list[tuple[float, str, str]],
) -> None:
    # The breaker keeps its window's sums as buckets come and go; a recount of every outcome
    # still in the window, done here from scratch after each one, must agree on when it opens.
    clock = _Stepped()
    breaker = CircuitBreaker("heavy-a", clock, BreakerSettings(window_s=30.0, min_requests=20))
    outcomes = {"ok": Outcome.SUCCESS, "fail": Outcome.FAILURE, "suspect": Outcome.SUSPECT}
    seen: list[tuple[int, str, str]] = []  # (bucket, kind, caller)
    for gap, kind, caller in events:
        clock.at += gap
        shape = 1 if kind == "ok" else 2  # shape 2 is never answered: suspects stay suspect
        breaker.record(outcomes[kind], breaker.allow(), Caller(caller, shape))
        bucket = math.floor(clock.now() / 3.0)
        seen = [e for e in seen if e[0] > bucket - 10] + [(bucket, kind, caller)]
        ok = sum(1 for e in seen if e[1] == "ok")
        failed = sum(1 for e in seen if e[1] == "fail")
        suspects = Counter(e[2] for e in seen if e[1] == "suspect")
        failed += sum(suspects.values()) if len(suspects) >= 2 else 0
        opens = ok + failed >= 20 and failed / (ok + failed) >= 0.2
        assert (state(breaker) is BreakerState.OPEN) == opens
        if opens:
            break
