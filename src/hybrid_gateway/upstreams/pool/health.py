"""One endpoint's health: passive outlier ejection on an injected clock.

``consecutive_failures`` failures in a row (connection errors, 5xx, timeouts, broken streams)
eject the endpoint for ``base_ejection_s``, doubled with each ejection in a row up to
``max_ejection_s``.  When that time is up, one request goes through as a probe (no other
until it settles): success takes the endpoint back, failure ejects it again for longer.  An
active check (``active.py``) that passes takes an ejected endpoint back at once; one that
fails counts as a failure.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from hybrid_gateway.resilience.clock import Clock

__all__ = ["EndpointHealth", "HealthState"]


class HealthState(enum.StrEnum):
    HEALTHY = "healthy"
    EJECTED = "ejected"
    # ejection time is up: the next request is a probe
    PROBING = "probing"


class EndpointHealth:
    __slots__ = (
        "_base_s", "_clock", "_listener", "_max_s", "_threshold", "ejected_at", "ejections",
        "ejections_total", "failures", "probe_in_flight", "restored_at", "state", "until",
    )  # fmt: skip

    def __init__(
        self,
        clock: Clock,
        *,
        consecutive_failures: int,
        base_ejection_s: float,
        max_ejection_s: float,
    ) -> None:
        self._clock = clock
        self._threshold = consecutive_failures
        self._base_s, self._max_s = base_ejection_s, max_ejection_s
        self._listener: Callable[[HealthState], None] | None = None
        self.state = HealthState.HEALTHY
        self.failures = 0  # in a row
        self.ejections = 0  # in a row: sets the next back-off
        self.ejections_total = 0
        self.until = 0.0
        self.probe_in_flight = False
        self.ejected_at: float | None = None
        self.restored_at: float | None = None

    def listen(self, listener: Callable[[HealthState], None]) -> None:
        """Told every state change (the pool: metrics, and the policy forgets an ejected one)."""
        self._listener = listener

    def available(self) -> bool:
        """May a request go here now?  (A probe-ready endpoint takes one request at a time.)"""
        if self.state is HealthState.HEALTHY:
            return True
        if self.state is HealthState.EJECTED:
            if self._clock.now() < self.until:
                return False
            self._set(HealthState.PROBING)
        return not self.probe_in_flight

    def admit(self) -> bool:
        """A request goes here (``available`` said so); True when it is the probe."""
        if self.state is HealthState.HEALTHY:
            return False
        self.probe_in_flight = True
        return True

    def success(self, probe: bool = False) -> None:
        self.failures = 0
        if probe:
            self.probe_in_flight = False
        if self.state is not HealthState.HEALTHY and (probe or not self.probe_in_flight):
            self._restore()

    def failure(self, probe: bool = False) -> None:
        self.failures += 1
        if probe:
            self.probe_in_flight = False
        # a failed probe, or the threshold reached (a request sent before an ejection that
        # fails after it changes nothing)
        probe_failed = self.state is HealthState.PROBING and (probe or not self.probe_in_flight)
        tripped = self.state is HealthState.HEALTHY and self.failures >= self._threshold
        if probe_failed or tripped:
            self._eject()

    def settle_neutral(self, probe: bool) -> None:
        """The attempt says nothing about health (the client left): free a probe slot."""
        if probe:
            self.probe_in_flight = False

    def check_passed(self) -> None:
        """An active check answered 2xx."""
        self.failures = 0
        if self.state is not HealthState.HEALTHY:
            self._restore()

    def check_failed(self) -> None:
        self.failure()

    def retry_in_s(self) -> float:
        """Seconds until an ejected endpoint takes its probe (0 when it may now)."""
        if self.state is HealthState.EJECTED:
            return max(0.0, self.until - self._clock.now())
        return 0.0

    def _eject(self) -> None:
        self.ejections += 1
        self.ejections_total += 1
        backoff = min(self._max_s, self._base_s * 2 ** (self.ejections - 1))
        now = self._clock.now()
        self.until = now + backoff
        self.ejected_at = now
        self._set(HealthState.EJECTED)

    def _restore(self) -> None:
        self.ejections = 0
        self.failures = 0
        self.restored_at = self._clock.now()
        self._set(HealthState.HEALTHY)

    def _set(self, state: HealthState) -> None:
        if state is not self.state:
            self.state = state
            if self._listener is not None:
                self._listener(state)
