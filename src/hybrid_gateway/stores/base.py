"""The key-value seam under the shared state: token buckets, spend, breaker windows, blobs.

One ``KVStore`` protocol, two implementations: ``MemoryStore`` (this process, the injected
clock) and ``RedisStore`` (one Redis, atomic Lua scripts, Redis ``TIME``).  The operations are
the few compound ones the gateway needs rather than raw GET/SET, because each must be atomic
across replicas: "refill, check and take from three buckets or from none" cannot be built from
separate commands without races.  Both implementations pass one contract suite
(tests/stores/test_contract.py).

Keys passed in are relative; the store prefixes them (``stores.key_prefix``).  A store that
cannot be reached raises ``StoreUnavailable``; callers apply the configured outage policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["BreakerVerdict", "BucketSpec", "KVStore", "SpendKey", "StoreUnavailable"]


class StoreUnavailable(Exception):
    """The shared store did not answer (refused, timed out, or marked down a moment ago)."""


@dataclass(frozen=True, slots=True)
class BucketSpec:
    """A token bucket to check and debit: ``amount`` of ``capacity``, refilled at ``rate``/s."""

    key: str
    rate: float
    capacity: float
    amount: float


@dataclass(frozen=True, slots=True)
class SpendKey:
    """A spend counter (e.g. a tenant's day) and how long it must outlive its period."""

    key: str
    ttl_s: float


@dataclass(frozen=True, slots=True)
class BreakerVerdict:
    """The shared window after a report: open for ``open_for_s`` more seconds (0 = closed)."""

    open_for_s: float


class KVStore(Protocol):
    async def take(
        self, buckets: Sequence[BucketSpec], *, force: bool = False
    ) -> tuple[float, int]:
        """Refill every bucket, then debit all of them if each holds its amount, else none.

        Returns ``(0.0, -1)`` when debited, else ``(wait_s, i)``: the longest wait and which
        bucket needs it.  A request larger than a bucket passes once the bucket is full (its
        debt holds back what follows).  ``force`` debits unconditionally (a correction; a
        negative amount gives tokens back, never above capacity).
        """
        ...

    async def add_spend(
        self, keys: Sequence[SpendKey], amount: float, once: SpendKey | None = None
    ) -> tuple[float, ...]:
        """Add ``amount`` to every counter and return their new totals.

        With ``once`` (an idempotency key, e.g. the request id) a repeated call adds nothing
        and returns the current totals, so a debit retried after a lost reply counts once.
        """
        ...

    async def read_spend(self, keys: Sequence[str]) -> tuple[float, ...]:
        """The counters' totals (0 for a missing one)."""
        ...

    async def get(self, key: str) -> bytes | None: ...

    async def set(self, key: str, value: bytes, ttl_s: float) -> None: ...

    async def breaker_report(
        self, key: str, successes: int, failures: int, *, window_s: float, min_requests: int,
        error_rate: float, open_s: float,
    ) -> BreakerVerdict:  # fmt: skip
        """Add a replica's outcomes to the shared rolling window; open it when the error rate
        over the window is reached (then the window restarts).  Reports how long it is open."""
        ...

    async def breaker_open(self, key: str, open_s: float) -> None:
        """Mark the shared breaker open for ``open_s`` (a replica's own breaker opened)."""
        ...

    async def ping(self) -> None: ...

    async def aclose(self) -> None: ...
