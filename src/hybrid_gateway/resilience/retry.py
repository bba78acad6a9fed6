"""Retrying failed upstream calls: which failures, how long to wait, and how many overall.

``RetryPolicy`` answers two questions about a failed attempt: may it be retried at all
(``is_retryable``) and how long to wait first (``delay``: the backoff schedule with jitter, or the
upstream's ``Retry-After`` when that is longer, capped).  ``RetryBudget`` bounds retries across
all requests to a share of the traffic, so a failing upstream sees at most ``1 + ratio`` times
its normal load instead of a retry storm (the idea of Finagle's ``RetryBudget``).

Both are plain objects on an injected ``Clock`` and ``random.Random``: tests drive them by hand.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from hybrid_gateway.errors import Overloaded, UpstreamTimeout, UpstreamUnavailable
from hybrid_gateway.resilience.clock import Clock

__all__ = ["RETRYABLE_CODES", "RetryBudget", "RetryPolicy"]

# Failures where the upstream did not process the request (or says to come back): safe to send
# again.  ``upstream_rate_limited`` is an upstream 429; the gateway's own full-queue 503
# (``lane_queue_timeout``) is not retried, that would only lengthen the queue.
RETRYABLE_CODES = frozenset(
    {
        "upstream_connection_error",
        "upstream_status_502",
        "upstream_status_503",
        "upstream_status_504",
        "upstream_timeout",
        "upstream_rate_limited",
    }
)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    rng: random.Random
    backoff_s: Sequence[float] = (0.2, 0.5, 1.0)
    jitter: float = 0.2  # each wait is drawn from [d * (1 - jitter), d * (1 + jitter)]
    max_retry_after_s: float = 5.0

    @property
    def max_attempts(self) -> int:
        return len(self.backoff_s) + 1

    @staticmethod
    def is_retryable(exc: BaseException) -> bool:
        """Only failures before the first byte reach here; the caller never retries later."""
        if isinstance(exc, UpstreamUnavailable | UpstreamTimeout | Overloaded):
            return exc.code in RETRYABLE_CODES
        return False

    def delay(self, retry: int, exc: BaseException | None = None) -> float | None:
        """Seconds to wait before retry number ``retry`` (1-based); None when out of retries."""
        if retry < 1 or retry > len(self.backoff_s):
            return None
        base = self.backoff_s[retry - 1]
        wait = base * self.rng.uniform(1 - self.jitter, 1 + self.jitter)
        if isinstance(exc, Overloaded) and exc.retry_after_s > wait:
            wait = min(exc.retry_after_s, max(self.max_retry_after_s, wait))
        return wait


class RetryBudget:
    """Retries allowed in a rolling window: ``ratio`` of the requests plus a floor per second.

    Counts live in one-second buckets, so memory is bounded by the window, not the traffic.
    As old buckets leave the window the budget refills.
    """

    def __init__(
        self, clock: Clock, *, ratio: float = 0.1, min_per_s: float = 1.0, window_s: int = 10
    ) -> None:
        self._clock = clock
        self._ratio = ratio
        self._floor = min_per_s * window_s
        self._window = window_s
        # [second, requests, retries], oldest first
        self._buckets: deque[list[int]] = deque()

    def _bucket(self) -> list[int]:
        second = int(self._clock.now())
        while self._buckets and self._buckets[0][0] <= second - self._window:
            self._buckets.popleft()
        if not self._buckets or self._buckets[-1][0] != second:
            self._buckets.append([second, 0, 0])
        return self._buckets[-1]

    def record_request(self) -> None:
        self._bucket()[1] += 1

    def try_spend(self) -> bool:
        """Take one retry if the window still allows it."""
        bucket = self._bucket()
        requests = sum(b[1] for b in self._buckets)
        retries = sum(b[2] for b in self._buckets)
        if retries + 1 > self._ratio * requests + self._floor:
            return False
        bucket[2] += 1
        return True
