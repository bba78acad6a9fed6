"""The tier stage: the lanes a tenant may use, and what its budget allows now.

Runs after routing, on the router's decision:

- a client that names a lane's model the tenant may not use gets 403 ``model_not_allowed``
  (``check_model``, at admission: the client asked for it explicitly);
- routed traffic headed for a forbidden lane goes to the tenant's first allowed lane;
- a tenant at its budget cap is moved to its ``downgrade_lane`` (``x-gateway-fallback: budget``)
  or refused with 402 ``insufficient_quota``, per its ``on_exceed`` policy.

A move keeps the original rule in the decision and says what moved it, so the header reads e.g.
``lane=light; channel=light-local; rule=default+tier:heavy->light``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hybrid_gateway.errors import InsufficientQuota, PermissionDenied
from hybrid_gateway.tenancy.budgets import BudgetBook
from hybrid_gateway.tenancy.settings import TenantConfig
from hybrid_gateway.types import RequestRecord, RouteDecision

__all__ = ["TierPolicy"]

BUDGET_FALLBACK = "budget"


class TierPolicy:
    def __init__(
        self,
        tenants: Mapping[str, TenantConfig],
        lane_channels: Mapping[str, str],
        model_lanes: Mapping[str, str | None],
        book: BudgetBook,
        wall: Callable[[], float],
    ) -> None:
        self._lanes = {
            name: frozenset(t.lanes) for name, t in tenants.items() if t.lanes is not None
        }
        self._first_lane = {name: t.lanes[0] for name, t in tenants.items() if t.lanes}
        self._lane_channels = dict(lane_channels)
        self._model_lanes = dict(model_lanes)
        self._book = book
        self._wall = wall

    @property
    def active(self) -> bool:
        """False when no tenant has lanes or a budget: the stage can be skipped."""
        return bool(self._lanes) or self._book.active

    def check_model(self, tenant: str, model: str) -> None:
        allowed = self._lanes.get(tenant)
        lane = self._model_lanes.get(model)
        if allowed is not None and lane is not None and lane not in allowed:
            raise PermissionDenied(
                f"Tenant '{tenant}' may not use the model '{model}' (lane '{lane}'); its "
                f"lanes are: {', '.join(sorted(allowed))}.",
                param="model",
            )

    def apply(self, record: RequestRecord, decision: RouteDecision) -> RouteDecision:
        tenant = record.tenant
        allowed = self._lanes.get(tenant)
        if allowed is not None and decision.lane not in allowed:
            decision = self._move(decision, self._first_lane[tenant], "tier")
        budget = self._book.budget(tenant)
        if budget is None:
            return decision
        cap = self._book.exceeded(tenant, self._wall())
        if cap is None:
            return decision
        if budget.on_exceed == "refuse":
            raise InsufficientQuota(
                f"Tenant '{tenant}' has reached its {cap} budget; requests are refused until "
                f"the period turns over (time zone {budget.timezone})."
            )
        if decision.lane != budget.downgrade_lane:
            decision = self._move(decision, budget.downgrade_lane, BUDGET_FALLBACK)
            record.fallback = BUDGET_FALLBACK
        return decision

    def _move(self, decision: RouteDecision, lane: str, why: str) -> RouteDecision:
        return RouteDecision(
            lane=lane,
            channel=self._lane_channels[lane],
            rule=f"{decision.rule}+{why}:{decision.lane}->{lane}",
            score=decision.score,
            downgraded=decision.downgraded or why == BUDGET_FALLBACK,
        )
