"""The emulator's ``@retry-after=N`` directive: an error status with a Retry-After header."""

from __future__ import annotations

from hybrid_gateway.tools.emulator.faults import FaultInjector, FaultKind, parse_model
from hybrid_gateway.tools.emulator.settings import FaultSettings


def test_retry_after_rides_on_the_scripted_error() -> None:
    base, script = parse_model("m@status=429@retry-after=3")
    assert base == "m" and script.retry_after_s == 3.0
    fault = FaultInjector(FaultSettings()).decide("m@status=429@retry-after=3", script)
    assert (fault.kind, fault.status, fault.retry_after_s) == (FaultKind.ERROR, 429, 3.0)


def test_without_the_directive_there_is_no_retry_after() -> None:
    _, script = parse_model("m@status=429")
    assert FaultInjector(FaultSettings()).decide("m@status=429", script).retry_after_s is None
