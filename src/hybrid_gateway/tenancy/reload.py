"""Hot reload of ``tenants`` and ``limits`` (api/reload.py): build everything, then swap.

``prepare_tenancy`` builds the new parts and changes nothing in force; ``TenancyReload.apply``
swaps them in with plain assignments (no await in between, so no request sees half of them):

- rate buckets keep their state (``tenancy/ratelimit.py``): same level and last update, new rate
  and capacity, the level clamped to the new capacity; new tenants' buckets start full.  With
  ``stores.backend: redis`` the buckets live in Redis and the Lua script takes rate and capacity
  on every call, so a new limiter object under the same keys keeps them the same way;
- budget spend is kept and only the caps change (``BudgetBook.plan``/``adopt``);
- tiers (lanes, downgrade lanes) are rebuilt; the API-key check takes the new tenant list: a key
  of a tenant removed from the config is refused with 401 from the next request, and works
  again if the tenant comes back (keys are never deleted by a reload).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hybrid_gateway.config import GatewayConfig
from hybrid_gateway.stores.shared import SharedState
from hybrid_gateway.tenancy.admission import (
    Tenancy,
    TenancyParts,
    rate_quotas,
    tenant_budgets,
    tier_policy,
)
from hybrid_gateway.tenancy.budgets import BookPlan
from hybrid_gateway.tenancy.ratelimit import RateLimiter
from hybrid_gateway.tenancy.settings import tenant_names
from hybrid_gateway.tenancy.tiers import TierPolicy

__all__ = ["TenancyReload", "prepare_tenancy"]


@dataclass(frozen=True, slots=True)
class TenancyReload:
    tenancy: Tenancy
    parts: TenancyParts
    book: BookPlan
    names: frozenset[str]

    def apply(self) -> TierPolicy | None:
        """Swap the new parts in; returns the tier stage for the pipeline (None: nothing to do)."""
        self.parts.book.adopt(self.book)
        if self.parts.authenticator is not None:
            self.parts.authenticator.replace_tenants(self.names)
        self.tenancy.adopt(self.parts)
        tiers = self.parts.tiers
        return tiers if tiers.active else None


def prepare_tenancy(
    tenancy: Tenancy, config: GatewayConfig, *, shared: SharedState | None
) -> TenancyReload:
    """The tenancy parts for ``config``, built from the ones in force; nothing is swapped yet."""
    parts = tenancy.parts
    tenants = config.tenants
    book = parts.book.plan(
        tenant_budgets(tenants),
        query=parts.log_query if shared is None else None,  # shared spend is read from Redis
        at=parts.wall(),
    )
    limiter = parts.limiter
    if isinstance(limiter, RateLimiter):
        limiter = limiter.reconfigured(rate_quotas(tenants), config.limits.global_)
    elif shared is not None:
        limiter = shared.limiter(tenants, config.limits)
    else:  # a shared limiter is only ever built from a shared state
        raise TypeError("a shared rate limiter reloads with its shared state")
    new = replace(parts, limiter=limiter, tiers=tier_policy(config, parts.book, parts.wall))
    return TenancyReload(tenancy, new, book, tenant_names(tenants))
