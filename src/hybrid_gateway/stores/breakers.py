"""Circuit-breaker state shared through the store, without a round trip per request.

Each replica keeps its own ``CircuitBreaker`` and its ``allow()`` stays a local check.  The
background sync (every ``sync_interval_ms``, 250 ms by default) does, per channel:

* if this replica's breaker opened since the last sync, write the shared open-until
  (``breaker_open``: Redis ``TIME`` + ``open_s``);
* send the outcomes counted since the last sync into the shared rolling window
  (``breaker_report``), which opens the shared breaker when the error rate over every replica's
  traffic reaches the threshold, and answers how long it is open;
* if it is open, hold the local breaker open for that long (``hold_open``).

So a breaker opened by replica A routes replica B's traffic to the backup within two sync
intervals (A's next sync writes it, B's next sync reads it): 0.5 s by default, at no cost per
request.  After open-until each replica goes half-open on its own and probes; a failed probe
re-opens its breaker, which the next sync publishes again.  While the store is down every
replica's breaker works on its own traffic only, as a single gateway does.
"""

from __future__ import annotations

from collections.abc import Mapping

from hybrid_gateway.resilience.breaker import BreakerSettings, BreakerState, CircuitBreaker
from hybrid_gateway.stores.base import KVStore, StoreUnavailable

__all__ = ["BreakerSync"]


class BreakerSync:
    """A ``BreakerListener`` (it notes local openings) and the per-sync exchange."""

    def __init__(self, store: KVStore, settings: BreakerSettings) -> None:
        self._store = store
        self._s = settings
        self._breakers: Mapping[str, CircuitBreaker] = {}
        self._opened_here: set[str] = set()
        self._applying = False

    def bind(self, breakers: Mapping[str, CircuitBreaker]) -> None:
        self._breakers = breakers

    def state_change(self, channel: str, old: BreakerState, new: BreakerState) -> None:
        if new is BreakerState.OPEN and not self._applying:
            self._opened_here.add(channel)

    async def sync(self) -> None:
        for name, breaker in self._breakers.items():
            key = f"breaker:{name}"
            try:
                if name in self._opened_here:
                    self._opened_here.discard(name)
                    await self._store.breaker_open(key, max(0.0, breaker.retry_after_s()))
                successes, failures = breaker.drain_counts()
                verdict = await self._store.breaker_report(
                    key, successes, failures, window_s=self._s.window_s,
                    min_requests=self._s.min_requests, error_rate=self._s.error_rate,
                    open_s=self._s.open_s,
                )  # fmt: skip
            except StoreUnavailable:
                return
            if verdict.open_for_s > 0:
                self._applying = True
                try:
                    breaker.hold_open(verdict.open_for_s)
                finally:
                    self._applying = False
