"""Cost caps per tenant: what was spent today and this month, in the tenant's time zone.

The book is debited with each finished request's real cost (usage x the channel's prices, 0 for
a cache hit) at the instant the request started, so the book and the request log agree on which
day a request belongs to.  Periods turn over by the calendar in ``budget.timezone``: a tenant
in Asia/Shanghai starts a new day at 16:00 UTC.

Spend survives a restart by being rebuilt from the request log at start-up (``rebuild``): the
log already holds every request's cost and start time, durably, so a second store of the same
figures could only disagree with it.  Without a request log spend starts at zero.  The book is
per process; with ``stores.backend: redis`` a ``SharedBudgetBook`` (stores/spend.py) keeps this
view in step with one set of counters in Redis, so replicas share one cap.

A hot reload changes the caps, not the spend (``plan`` then ``adopt``): a tenant whose budget
keeps its time zone keeps what it has spent today and this month, and the new caps apply to it
from the next request.  A tenant that gets a budget, or whose time zone changes, has its spend
summed from the request log as at start-up (zero without a log; with the shared book its view is
read from Redis at the next sync).  A tenant whose budget is removed is no longer counted.

A cap is checked when a request is routed; requests already in flight still finish, so spend
can pass the cap by what they cost.  Instants are epoch seconds passed in by the caller (from
an injected wall clock), never read here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from hybrid_gateway.tenancy.settings import BudgetConfig

__all__ = ["BookPlan", "BudgetBook", "Periods", "periods"]

Query = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]


@dataclass(frozen=True, slots=True)
class Periods:
    """The day and the month an instant falls in, and when each began (epoch seconds)."""

    day: date
    month: tuple[int, int]
    day_start: float
    month_start: float


def periods(at: float, zone: ZoneInfo) -> Periods:
    local = datetime.fromtimestamp(at, zone)
    day_start = local.replace(hour=0, minute=0, second=0, microsecond=0)
    month_start = day_start.replace(day=1)
    return Periods(
        local.date(), (local.year, local.month), day_start.timestamp(), month_start.timestamp()
    )


@dataclass(slots=True)
class _Spend:
    day: date
    month: tuple[int, int]
    day_usd: float = 0.0
    month_usd: float = 0.0


@dataclass(frozen=True, slots=True)
class BookPlan:
    """New caps and the spend they start from, built before a reload swaps anything in."""

    budgets: dict[str, BudgetConfig]
    zones: dict[str, ZoneInfo]
    spend: dict[str, _Spend]


class BudgetBook:
    """Spend per tenant for the tenants that have a budget."""

    def __init__(self, budgets: Mapping[str, BudgetConfig]) -> None:
        self._budgets = dict(budgets)
        self._zones = {name: ZoneInfo(b.timezone) for name, b in budgets.items()}
        self._spend: dict[str, _Spend] = {}

    @property
    def active(self) -> bool:
        return bool(self._budgets)

    def budget(self, tenant: str) -> BudgetConfig | None:
        return self._budgets.get(tenant)

    def exceeded(self, tenant: str, at: float) -> str | None:
        """``"daily"`` or ``"monthly"`` when that cap is reached at ``at``, else None."""
        budget = self._budgets.get(tenant)
        if budget is None:
            return None
        spend = self._current(tenant, at)
        if budget.daily is not None and spend.day_usd >= budget.daily:
            return "daily"
        if budget.monthly is not None and spend.month_usd >= budget.monthly:
            return "monthly"
        return None

    def spent(self, tenant: str, at: float) -> tuple[float, float]:
        """(today, this month) at ``at``; zeros for a tenant without a budget."""
        if tenant not in self._budgets:
            return 0.0, 0.0
        spend = self._current(tenant, at)
        return spend.day_usd, spend.month_usd

    def debit(self, tenant: str, cost_usd: float, at: float, request_id: str = "") -> None:
        """Add a request's cost to the periods of ``at`` (its start) that are still current.

        ``request_id`` lets a shared book count each request once; this one ignores it.
        """
        if cost_usd <= 0 or tenant not in self._budgets:
            return
        spend = self._current(tenant, at)
        when = periods(at, self._zones[tenant])
        if when.month == spend.month:
            spend.month_usd += cost_usd
            if when.day == spend.day:
                spend.day_usd += cost_usd

    def rebuild(self, query: Query, at: float) -> None:
        """Today's and this month's spend of every budgeted tenant, from the request log."""
        for tenant, zone in self._zones.items():
            self._spend[tenant] = _summed(query, tenant, zone, at)

    def plan(
        self, budgets: Mapping[str, BudgetConfig], *, query: Query | None, at: float
    ) -> BookPlan:
        """The book under new caps (module docstring); nothing changes until ``adopt``."""
        zones = {name: ZoneInfo(b.timezone) for name, b in budgets.items()}
        spend: dict[str, _Spend] = {}
        for tenant, budget in budgets.items():
            old = self._budgets.get(tenant)
            if old is not None and old.timezone == budget.timezone:
                if tenant in self._spend:
                    spend[tenant] = self._spend[tenant]
            elif query is not None:
                spend[tenant] = _summed(query, tenant, zones[tenant], at)
        return BookPlan(dict(budgets), zones, spend)

    def adopt(self, plan: BookPlan) -> None:
        """Swap in what ``plan`` built."""
        self._budgets, self._zones, self._spend = plan.budgets, plan.zones, plan.spend

    def set_spend(self, tenant: str, at: float, day_usd: float, month_usd: float) -> None:
        """Replace the tenant's spend for ``at``'s periods (a shared book's refresh).

        A tenant without a budget (any more: a reload during the refresh) is ignored.
        """
        zone = self._zones.get(tenant)
        if zone is None:
            return
        when = periods(at, zone)
        self._spend[tenant] = _Spend(when.day, when.month, day_usd, month_usd)

    def _current(self, tenant: str, at: float) -> _Spend:
        """The tenant's spend, turned over to ``at``'s periods if they are newer."""
        when = periods(at, self._zones[tenant])
        spend = self._spend.get(tenant)
        if spend is None:
            spend = self._spend[tenant] = _Spend(when.day, when.month)
        if when.month > spend.month:
            spend.month, spend.month_usd = when.month, 0.0
        if when.day > spend.day:
            spend.day, spend.day_usd = when.day, 0.0
        return spend


_SPENT_SINCE = "SELECT coalesce(sum(cost_usd), 0) FROM requests WHERE tenant = ? AND ts >= ?"


def _summed(query: Query, tenant: str, zone: ZoneInfo, at: float) -> _Spend:
    """The tenant's spend in ``at``'s day and month, from the request log."""
    now = periods(at, zone)
    month = float(query(_SPENT_SINCE, (tenant, now.month_start))[0][0])
    day = float(query(_SPENT_SINCE, (tenant, now.day_start))[0][0])
    return _Spend(now.day, now.month, day, month)
