"""Rate quotas in the shared store: one set of token buckets for every replica.

The same chain as ``tenancy/ratelimit.RateLimiter`` (the tenant's quota, then the global one;
all buckets debited or none), as one atomic ``take`` on the store: a Lua script in Redis, so
two replicas admitting at once cannot both take the last token.  The refusal's wait is computed
in the script from Redis ``TIME``.

While the store is down, ``rate_limits_on_outage`` decides: ``open`` admits (availability
first; the limits are not enforced until Redis returns), ``closed`` refuses every request of a
rate-limited tenant with 429 and ``Retry-After: retry_s`` (the quota first).  Token corrections
at settle time are queued on the outbox; one lost while the store is down is simply lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hybrid_gateway.stores.base import BucketSpec, KVStore, StoreUnavailable
from hybrid_gateway.stores.outbox import Outbox
from hybrid_gateway.tenancy.ratelimit import Decision
from hybrid_gateway.tenancy.settings import RateQuota

__all__ = ["SharedRateLimiter"]

_ADMIT = Decision(True)


@dataclass(frozen=True, slots=True)
class _Quota:
    key: str  # "rate:tenant:acme" or "rate:global"
    scope: str  # "tenant" or "global" (for the refusal's limit name)
    quota: RateQuota

    def buckets(self, tokens: int) -> list[tuple[BucketSpec, str]]:
        q, out = self.quota, []
        if q.requests_per_s is not None:
            burst = q.burst if q.burst is not None else max(1.0, q.requests_per_s)
            spec = BucketSpec(self.key + ":requests", q.requests_per_s, float(burst), 1.0)
            out.append((spec, f"{self.scope}:requests"))
        if q.tokens_per_min is not None:
            per_min = float(q.tokens_per_min)
            spec = BucketSpec(self.key + ":tokens", per_min / 60.0, per_min, float(tokens))
            out.append((spec, f"{self.scope}:tokens"))
        return out


class SharedRateLimiter:
    def __init__(
        self,
        tenants: Mapping[str, RateQuota],
        global_: RateQuota | None,
        store: KVStore,
        outbox: Outbox,
        *,
        fail_open: bool,
        retry_s: float,
    ) -> None:
        shared = None if global_ is None else _Quota("rate:global", "global", global_)
        self._chains = {
            name: tuple(
                q for q in (_Quota(f"rate:tenant:{name}", "tenant", quota), shared) if q is not None
            )
            for name, quota in tenants.items()
        }
        self._default: tuple[_Quota, ...] = () if shared is None else (shared,)
        self._store = store
        self._outbox = outbox
        self._fail_open = fail_open
        self._retry_s = retry_s

    def counts_tokens(self, tenant: str) -> bool:
        return any(q.quota.tokens_per_min is not None for q in self._chain(tenant))

    async def admit(self, tenant: str, tokens: int) -> Decision:
        chain = self._chain(tenant)
        if not chain:
            return _ADMIT
        named = [b for q in chain for b in q.buckets(tokens)]
        try:
            wait, worst = await self._store.take([spec for spec, _ in named])
        except StoreUnavailable:
            if self._fail_open:
                return _ADMIT
            return Decision(False, self._retry_s, "store:unavailable")
        return _ADMIT if worst < 0 else Decision(False, wait, named[worst][1])

    def correct(self, tenant: str, delta_tokens: int) -> None:
        """Settle: give back (or take) the difference between real and estimated tokens."""
        if not delta_tokens:
            return
        specs = [
            spec
            for q in self._chain(tenant)
            for spec, name in q.buckets(delta_tokens)
            if name.endswith(":tokens")
        ]
        if specs:
            self._outbox.submit(lambda: self._store.take(specs, force=True))

    def _chain(self, tenant: str) -> tuple[_Quota, ...]:
        return self._chains.get(tenant, self._default)
