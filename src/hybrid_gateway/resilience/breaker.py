"""A circuit breaker per upstream channel: a small state machine on an injected clock.

    closed --(error rate >= threshold over the window, >= min_requests)--> open
    open --(open_s passed)--> half_open
    half_open --(a probe succeeds)--> closed
    half_open --(a probe fails)--> open

Outcomes are counted in a rolling window of buckets (``window_s`` split into ``_BUCKETS``), so
memory does not grow with traffic.  In half-open at most ``half_open_probes`` requests are let
through at a time.

Each request ``allow`` lets through gets an ``Admission``: the state's generation (one per state
change) and whether it is a half-open probe.  ``record`` takes it back with the outcome, and only
an outcome of the current generation counts: a probe's decides half-open, a closed-state
admission's goes into the window.  A request let through while closed that ends after the
breaker opened (and perhaps went half-open) changes nothing: a stale success must not close a
breaker whose probe is still out, a stale failure must not re-open it, and a stale
cancellation must not free a probe slot it never took.

No single caller can open it.  A failure the server *answered* (a 500 with a body: it may
follow from the request, e.g. a template error on a malformed message) is ``SUSPECT``: it counts
only when it comes with the request's ``Caller`` and either that request's shape (its
structure, no content) was answered before by this channel, so the server now fails what it
did before, or suspect failures in the window come from at least ``min_distinct_callers``
tenants/keys.  Uncounted suspect failures are left out of the rate altogether (neither failures
nor requests).  Connection errors, timeouts, 502-504 and 429 are ``FAILURE`` and always count.

State changes go to listeners (metrics attach there, like pybreaker's
``CircuitBreakerListener.state_change``); nothing in here knows about metrics.
"""

from __future__ import annotations

import enum
import math
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hybrid_gateway.resilience.clock import Clock

__all__ = [
    "Admission",
    "BreakerListener",
    "BreakerSettings",
    "BreakerState",
    "Caller",
    "CircuitBreaker",
    "Outcome",
]

_BUCKETS = 10


class BreakerState(enum.StrEnum):
    CLOSED = "closed"
    HALF_OPEN = "half_open"
    OPEN = "open"


class Outcome(enum.Enum):
    SUCCESS = "success"
    FAILURE = "failure"
    # The server answered with an error that may follow from the request (see above).
    SUSPECT = "suspect"
    # The attempt says nothing about the channel's health (e.g. the gateway's own queue was
    # full): it frees a half-open probe slot and is not counted.
    IGNORED = "ignored"


@dataclass(frozen=True, slots=True)
class Admission:
    """What ``allow`` granted: hand it back to ``record`` with the request's outcome."""

    generation: int  # the breaker's state generation when it was granted
    probe: bool  # a half-open probe (holds one of its slots)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent the request (tenant or API key) and its shape (``resilience/shape.py``)."""

    id: str
    shape: int


# Request shapes a channel answered, remembered per breaker (least recently answered dropped).
_MAX_SHAPES = 4096


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    window_s: float = 30.0
    min_requests: int = 20
    error_rate: float = 0.2
    open_s: float = 30.0
    half_open_probes: int = 1
    min_distinct_callers: int = 2


class BreakerListener(Protocol):
    def state_change(self, channel: str, old: BreakerState, new: BreakerState) -> None: ...


class CircuitBreaker:
    def __init__(
        self,
        channel: str,
        clock: Clock,
        settings: BreakerSettings = BreakerSettings(),
        listeners: Sequence[BreakerListener] = (),
    ) -> None:
        self.channel = channel
        self._clock = clock
        self._s = settings
        self._listeners = tuple(listeners)
        self._state = BreakerState.CLOSED
        self._generation = 0  # +1 on every state change: outcomes of older admissions are stale
        self._opened_at = 0.0
        self._probes = 0  # half-open requests in flight
        self._bucket_s = settings.window_s / _BUCKETS
        # [bucket index, successes, failures], oldest first; suspect failures per caller beside
        self._buckets: deque[list[int]] = deque()
        self._suspects: deque[dict[str, int]] = deque()
        # The window's sums, kept as buckets come and go: a request adds, it never re-sums.
        self._successes = self._failures = self._suspected = 0
        self._answered: OrderedDict[int, None] = OrderedDict()  # shapes answered (LRU)
        # Outcomes counted since the last ``drain_counts`` (the shared-state sync reads them).
        self._unsynced = [0, 0]

    @property
    def state(self) -> BreakerState:
        if self._state is BreakerState.OPEN and self.retry_after_s() <= 0:
            self._move(BreakerState.HALF_OPEN)
        return self._state

    def retry_after_s(self) -> float:
        """Seconds until an open breaker turns half-open (0 when it is not open)."""
        if self._state is not BreakerState.OPEN:
            return 0.0
        return max(0.0, self._opened_at + self._s.open_s - self._clock.now())

    def allow(self) -> Admission | None:
        """May a request go to this channel now (None: no)?  In half-open this takes a probe
        slot, which the request's ``record`` frees."""
        state = self.state
        if state is BreakerState.CLOSED:
            return Admission(self._generation, probe=False)
        if state is BreakerState.HALF_OPEN and self._probes < self._s.half_open_probes:
            self._probes += 1
            return Admission(self._generation, probe=True)
        return None

    def record(
        self, outcome: Outcome, admission: Admission | None = None, caller: Caller | None = None
    ) -> None:
        """Report the outcome of a request that ``allow`` let through with ``admission``.

        Without an admission the outcome counts only while the breaker is closed.  ``caller``
        lets a success remember its shape and a suspect failure be judged (without it a
        suspect failure counts as a failure).
        """
        if admission is not None and admission.generation != self._generation:
            return  # let through before the last state change: says nothing about this one
        outcome = self._judge(outcome, caller)
        if admission is not None and admission.probe:  # the generation is this half-open one
            self._probes = max(0, self._probes - 1)
            if outcome is Outcome.SUCCESS:
                self._move(BreakerState.CLOSED)
            elif outcome is Outcome.FAILURE:
                self._move(BreakerState.OPEN)
            return
        if outcome is Outcome.IGNORED or self._state is not BreakerState.CLOSED:
            return
        if outcome is Outcome.SUSPECT:
            assert caller is not None  # ``_judge`` made it a failure otherwise
            suspects = self._bucket_suspects()
            suspects[caller.id] = suspects.get(caller.id, 0) + 1
            self._suspected += 1
        elif outcome is Outcome.SUCCESS:
            self._bucket()[1] += 1
            self._successes += 1
            self._unsynced[0] += 1
        else:
            self._bucket()[2] += 1
            self._failures += 1
            self._unsynced[1] += 1
        failures = self._failures + (self._counted_suspects() if self._suspected else 0)
        total = self._successes + failures
        if total >= self._s.min_requests and failures / total >= self._s.error_rate:
            self._move(BreakerState.OPEN)

    def _judge(self, outcome: Outcome, caller: Caller | None) -> Outcome:
        """A success remembers its shape; a suspect failure of a known shape is a failure."""
        if caller is not None and outcome is Outcome.SUCCESS:
            self._answered[caller.shape] = None
            self._answered.move_to_end(caller.shape)
            if len(self._answered) > _MAX_SHAPES:
                self._answered.popitem(last=False)
        if outcome is not Outcome.SUSPECT:
            return outcome
        if caller is None or self._s.min_distinct_callers <= 1 or caller.shape in self._answered:
            return Outcome.FAILURE
        return Outcome.SUSPECT

    def _counted_suspects(self) -> int:
        """Suspect failures in the window, once enough distinct callers have had them."""
        per_caller: dict[str, int] = {}
        for bucket in self._suspects:
            for caller, count in bucket.items():
                per_caller[caller] = per_caller.get(caller, 0) + count
        if len(per_caller) < self._s.min_distinct_callers:
            return 0
        return sum(per_caller.values())

    def drain_counts(self) -> tuple[int, int]:
        """(successes, failures) counted in the window since the last call; resets them."""
        counts = (self._unsynced[0], self._unsynced[1])
        self._unsynced = [0, 0]
        return counts

    def hold_open(self, seconds: float) -> None:
        """Open now for ``seconds`` because another replica's breaker opened (shared state)."""
        if seconds <= 0 or (self._state is BreakerState.OPEN and self.retry_after_s() >= seconds):
            return
        if self._state is not BreakerState.OPEN:
            self._move(BreakerState.OPEN)
        self._opened_at = self._clock.now() - self._s.open_s + seconds

    def _bucket(self) -> list[int]:
        index = math.floor(self._clock.now() / self._bucket_s)
        while self._buckets and self._buckets[0][0] <= index - _BUCKETS:
            _, successes, failures = self._buckets.popleft()
            self._successes -= successes
            self._failures -= failures
            self._suspected -= sum(self._suspects.popleft().values())
        if not self._buckets or self._buckets[-1][0] != index:
            self._buckets.append([index, 0, 0])
            self._suspects.append({})
        return self._buckets[-1]

    def _bucket_suspects(self) -> dict[str, int]:
        self._bucket()  # rolls the window; the two deques move together
        return self._suspects[-1]

    def _move(self, new: BreakerState) -> None:
        old, self._state = self._state, new
        self._generation += 1
        if new is BreakerState.OPEN:
            self._opened_at = self._clock.now()
        if new is not BreakerState.HALF_OPEN:
            self._probes = 0
        if new is BreakerState.CLOSED:
            self._buckets.clear()  # a fresh start: old failures do not re-open it at once
            self._suspects.clear()
            self._successes = self._failures = self._suspected = 0
        for listener in self._listeners:
            listener.state_change(self.channel, old, new)
