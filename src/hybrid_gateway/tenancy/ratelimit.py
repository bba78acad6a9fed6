"""Rate quotas as token buckets: requests/s with a burst, and tokens/min, per tenant and global.

A request is admitted only if every bucket that applies to it (its tenant's request and token
buckets, then the global ones) holds enough; it is then debited from all of them at once, so a
refusal by the global limit costs the tenant nothing (first deny wins, nothing half-taken).
The token buckets are debited with the prompt estimate on admission, when the answer's length
is unknown, and corrected with the real usage when the request is settled: a correction may
leave a bucket in debt, which later requests wait out.

The refusal carries ``retry_after_s``: how long until the bucket that refused holds enough
again at its refill rate (the longest of them when several refuse).  Time comes from the
injected ``Clock``; tests drive it by hand.

A hot reload (``reconfigured``) keeps every bucket whose quota still exists: it keeps its level
and the time it was last updated, takes the new rate and capacity, and is clamped to the new
capacity at once; the time since its last update then refills at the new rate.  A bucket in
debt keeps its debt.  A bucket the old quotas did not have starts full; one the new quotas drop
is forgotten.  The shared limiter (stores/limits.py) gets the same rule from its Lua script,
which takes rate and capacity as arguments on every call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.tenancy.settings import RateQuota

__all__ = ["Decision", "QuotaBuckets", "RateLimiter", "TokenBucket"]


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    retry_after_s: float = 0.0
    # Which limit refused: "tenant:requests", "global:tokens", ...
    limit: str | None = None


class TokenBucket:
    """``capacity`` tokens, refilled continuously at ``rate`` per second.

    The ``*_at`` methods take the current time from the caller, so one admission reads the
    clock once for all its buckets.
    """

    def __init__(self, rate: float, capacity: float, clock: Clock) -> None:
        self.rate = rate
        self.capacity = capacity
        self._clock = clock
        self._level = capacity
        self._stamp = clock.now()

    @property
    def level(self) -> float:
        self._refill(self._clock.now())
        return self._level

    def resized(self, rate: float, capacity: float) -> TokenBucket:
        """This bucket under a new rate and capacity: same level (clamped), same last update."""
        bucket = TokenBucket(rate, capacity, self._clock)
        bucket._level = min(capacity, self._level)
        bucket._stamp = self._stamp
        return bucket

    def wait_for(self, amount: float) -> float:
        return self.wait_at(amount, self._clock.now())

    def take(self, amount: float) -> None:
        self.take_at(amount, self._clock.now())

    def wait_at(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` can be taken (0 = now).

        A request larger than the whole bucket is let through once the bucket is full (its
        debt then holds back what follows), else it could never pass.
        """
        self._refill(now)
        need = min(amount, self.capacity) - self._level
        return 0.0 if need <= 0 else need / self.rate

    def take_at(self, amount: float, now: float) -> None:
        """Debit ``amount`` (a negative amount gives tokens back, never above capacity)."""
        self._refill(now)
        self._level = min(self.capacity, self._level - amount)

    def _refill(self, now: float) -> None:
        if now > self._stamp:
            self._level = min(self.capacity, self._level + (now - self._stamp) * self.rate)
            self._stamp = now


class QuotaBuckets:
    """The buckets of one ``RateQuota``: requests and/or tokens."""

    def __init__(self, scope: str, quota: RateQuota, clock: Clock) -> None:
        self._names = (f"{scope}:requests", f"{scope}:tokens")
        self._scope = scope
        self._clock = clock
        self.requests: TokenBucket | None = None
        self.tokens: TokenBucket | None = None
        if quota.requests_per_s is not None:
            burst = quota.burst if quota.burst is not None else max(1.0, quota.requests_per_s)
            self.requests = TokenBucket(quota.requests_per_s, float(burst), clock)
        if quota.tokens_per_min is not None:
            per_min = float(quota.tokens_per_min)
            self.tokens = TokenBucket(per_min / 60.0, per_min, clock)

    def reconfigured(self, quota: RateQuota) -> QuotaBuckets:
        """New buckets for ``quota`` that keep this one's levels (module docstring)."""
        new = QuotaBuckets(self._scope, quota, self._clock)
        if new.requests is not None and self.requests is not None:
            new.requests = self.requests.resized(new.requests.rate, new.requests.capacity)
        if new.tokens is not None and self.tokens is not None:
            new.tokens = self.tokens.resized(new.tokens.rate, new.tokens.capacity)
        return new

    def wait(self, tokens: int, now: float) -> tuple[float, str]:
        """The longest wait among this quota's buckets, and which one (0 = admit now)."""
        wait, limit = 0.0, ""
        if self.requests is not None:
            wait, limit = self.requests.wait_at(1, now), self._names[0]
        if self.tokens is not None:
            tokens_wait = self.tokens.wait_at(tokens, now)
            if tokens_wait > wait:
                wait, limit = tokens_wait, self._names[1]
        return wait, limit

    def take(self, tokens: int, now: float) -> None:
        if self.requests is not None:
            self.requests.take_at(1, now)
        if self.tokens is not None:
            self.tokens.take_at(tokens, now)

    def correct(self, delta_tokens: int, now: float) -> None:
        if self.tokens is not None and delta_tokens:
            self.tokens.take_at(delta_tokens, now)


class RateLimiter:
    """Tenant quotas chained with the global one.

    With ``previous`` (a hot reload) every bucket that still exists keeps its level there.
    """

    _own: dict[str, QuotaBuckets]
    _global: QuotaBuckets | None

    def __init__(
        self,
        tenants: Mapping[str, RateQuota],
        global_: RateQuota | None,
        clock: Clock,
        *,
        previous: RateLimiter | None = None,
    ) -> None:
        self._clock = clock
        old_own = previous._own if previous is not None else {}
        old_global = previous._global if previous is not None else None

        def carry(old: QuotaBuckets | None, scope: str, quota: RateQuota) -> QuotaBuckets:
            return QuotaBuckets(scope, quota, clock) if old is None else old.reconfigured(quota)

        self._own = {name: carry(old_own.get(name), "tenant", q) for name, q in tenants.items()}
        self._global = None if global_ is None else carry(old_global, "global", global_)
        shared = self._global
        # Each tenant's chain, built once: its own quota, then the global one.
        self._chains = {
            name: tuple(q for q in (quota, shared) if q is not None)
            for name, quota in self._own.items()
        }
        self._default_chain: tuple[QuotaBuckets, ...] = () if shared is None else (shared,)

    def reconfigured(
        self, tenants: Mapping[str, RateQuota], global_: RateQuota | None
    ) -> RateLimiter:
        """A limiter for the new quotas that keeps the buckets' levels (hot reload)."""
        return RateLimiter(tenants, global_, self._clock, previous=self)

    def counts_tokens(self, tenant: str) -> bool:
        """Whether admitting ``tenant`` needs a prompt token estimate (skip the work if not)."""
        return any(q.tokens is not None for q in self._chain(tenant))

    def admit(self, tenant: str, tokens: int) -> Decision:
        chain = self._chain(tenant)
        if not chain:
            return _ADMIT
        now = self._clock.now()
        wait, limit = 0.0, ""
        for quota in chain:
            quota_wait, quota_limit = quota.wait(tokens, now)
            if quota_wait > wait:
                wait, limit = quota_wait, quota_limit
        if wait > 0:
            return Decision(False, wait, limit)
        for quota in chain:
            quota.take(tokens, now)
        return _ADMIT

    def correct(self, tenant: str, delta_tokens: int) -> None:
        """Settle: the real token count minus what admission debited."""
        now = self._clock.now()
        for quota in self._chain(tenant):
            quota.correct(delta_tokens, now)

    def _chain(self, tenant: str) -> tuple[QuotaBuckets, ...]:
        return self._chains.get(tenant, self._default_chain)


_ADMIT = Decision(True)
