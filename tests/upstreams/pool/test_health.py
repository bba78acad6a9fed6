"""Passive outlier ejection on a hand-driven clock: threshold, growing back-off, one probe."""

from __future__ import annotations

from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.upstreams.pool.health import EndpointHealth, HealthState


def state(h: EndpointHealth) -> HealthState:
    return h.state  # read through a call: each assert sees the state as it is now


def health(clock: ManualClock, threshold: int = 3) -> tuple[EndpointHealth, list[HealthState]]:
    seen: list[HealthState] = []
    h = EndpointHealth(clock, consecutive_failures=threshold, base_ejection_s=1.0,
                       max_ejection_s=4.0)  # fmt: skip
    h.listen(seen.append)
    return h, seen


async def test_failures_in_a_row_eject_and_a_success_between_resets_the_count() -> None:
    clock = ManualClock()
    h, seen = health(clock)
    h.failure()
    h.failure()
    h.success()
    h.failure()
    h.failure()
    assert h.available() and state(h) is HealthState.HEALTHY
    h.failure()
    assert state(h) is HealthState.EJECTED and not h.available()
    assert seen == [HealthState.EJECTED]
    assert h.retry_in_s() == 1.0


async def test_after_the_back_off_one_probe_goes_through_and_its_success_restores() -> None:
    clock = ManualClock()
    h, seen = health(clock, threshold=1)
    h.failure()
    await clock.advance(0.99)
    assert not h.available()
    await clock.advance(0.01)
    assert h.available()
    assert h.admit() is True  # the probe
    assert not h.available()  # no second request while the probe is out
    h.success(probe=True)
    assert state(h) is HealthState.HEALTHY and h.available()
    assert seen == [HealthState.EJECTED, HealthState.PROBING, HealthState.HEALTHY]
    assert h.restored_at == 1.0 and h.ejected_at == 0.0


async def test_a_failed_probe_ejects_again_for_twice_as_long_up_to_the_cap() -> None:
    clock = ManualClock()
    h, _ = health(clock, threshold=1)
    h.failure()
    backoffs = []
    for _ in range(4):
        backoffs.append(h.retry_in_s())
        await clock.advance(h.retry_in_s())
        assert h.available() and h.admit()
        h.failure(probe=True)
    assert backoffs == [1.0, 2.0, 4.0, 4.0]
    assert h.ejections_total == 5
    await clock.advance(4.0)
    assert h.available() and h.admit()
    h.success(probe=True)
    h.failure()  # the back-off starts over after a restore
    assert h.retry_in_s() == 1.0


async def test_a_neutral_probe_frees_the_probe_slot_and_changes_nothing() -> None:
    clock = ManualClock()
    h, _ = health(clock, threshold=1)
    h.failure()
    await clock.advance(1.0)
    assert h.available() and h.admit()
    h.settle_neutral(probe=True)
    assert state(h) is HealthState.PROBING and h.available()


async def test_late_failures_of_requests_sent_before_the_ejection_do_not_extend_it() -> None:
    clock = ManualClock()
    h, _ = health(clock, threshold=2)
    h.failure()
    h.failure()
    assert state(h) is HealthState.EJECTED
    h.failure()  # a request that was already in flight
    assert h.retry_in_s() == 1.0 and h.ejections_total == 1
    await clock.advance(1.0)
    assert h.available() and h.admit()
    h.failure()  # another old request ends while the probe is out: the probe decides
    assert state(h) is HealthState.PROBING


async def test_active_checks_take_an_ejected_endpoint_back_or_count_as_failures() -> None:
    clock = ManualClock()
    h, _ = health(clock, threshold=2)
    h.check_failed()
    h.check_failed()
    assert state(h) is HealthState.EJECTED
    h.check_passed()
    assert state(h) is HealthState.HEALTHY and h.failures == 0
