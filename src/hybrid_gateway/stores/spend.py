"""Budgets in the shared store: one day and one month counter per tenant, for every replica.

``SharedBudgetBook`` is a ``BudgetBook`` whose view is kept in step with Redis:

* ``debit`` (at settle) adds the cost to this replica's view at once and queues it;
* ``sync`` (the background loop, every ``sync_interval_ms``) sends the queue, each debit as one
  Lua script that adds to the tenant's day and month counters (keys expire after their period)
  guarded by an idempotency key on the request id, so a debit retried after a lost reply is
  counted once; then it reads every budgeted tenant's counters back and replaces the view with
  them plus whatever is still queued.

Caps are checked on the view, so a replica sees another's spend within one sync interval (the
single-process book already lets in-flight requests pass the cap by what they cost; this adds
at most one interval of other replicas' spend).  While Redis is down the queue waits and the
view keeps counting locally (``budgets_on_outage: local``); when Redis returns the queue is sent
and the view reconciled.  Spend lives in Redis, so it is not rebuilt from the request log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hybrid_gateway.stores.base import KVStore, SpendKey, StoreUnavailable
from hybrid_gateway.tenancy.budgets import BudgetBook, Periods, periods
from hybrid_gateway.tenancy.settings import BudgetConfig

__all__ = ["SharedBudgetBook"]

_DAY_TTL_S = 3 * 86_400.0
_MONTH_TTL_S = 33 * 86_400.0
# An idempotency key outlives any retry of its debit.
_ONCE_TTL_S = 86_400.0


@dataclass(frozen=True, slots=True)
class _Debit:
    tenant: str
    cost_usd: float
    at: float
    request_id: str
    # Its day and month counters, fixed when debited: a reload may change or drop the budget.
    keys: tuple[str, str]


def _keys(tenant: str, when: Periods) -> tuple[str, str]:
    year, month = when.month
    return (
        f"budget:{tenant}:day:{when.day.isoformat()}",
        f"budget:{tenant}:month:{year:04d}-{month:02d}",
    )


class SharedBudgetBook(BudgetBook):
    def __init__(
        self, budgets: Mapping[str, BudgetConfig], store: KVStore, wall: Callable[[], float]
    ) -> None:
        super().__init__(budgets)
        self._store = store
        self._wall = wall
        self._queued: list[_Debit] = []

    @property
    def queued(self) -> int:
        """Debits not yet in the shared store (non-zero while it is down)."""
        return len(self._queued)

    def debit(self, tenant: str, cost_usd: float, at: float, request_id: str = "") -> None:
        zone = self._zones.get(tenant)
        if cost_usd <= 0 or zone is None:
            return
        super().debit(tenant, cost_usd, at)
        keys = _keys(tenant, periods(at, zone))
        self._queued.append(_Debit(tenant, cost_usd, at, request_id, keys))

    async def sync(self) -> None:
        """Send the queued debits, then refresh the view from the shared counters."""
        try:
            while self._queued:
                debit = self._queued[0]
                day, month = debit.keys
                once = SpendKey(f"budget:once:{debit.request_id}", _ONCE_TTL_S)
                await self._store.add_spend(
                    [SpendKey(day, _DAY_TTL_S), SpendKey(month, _MONTH_TTL_S)],
                    debit.cost_usd,
                    once if debit.request_id else None,
                )
                self._queued.pop(0)
            await self._refresh(self._wall())
        except StoreUnavailable:
            return  # the view keeps counting locally; the queue waits for the store

    async def _refresh(self, at: float) -> None:
        zones = dict(self._zones)  # a reload may swap the budgets while this awaits
        tenants = list(zones)
        names: list[str] = []
        for tenant in tenants:
            names.extend(_keys(tenant, periods(at, zones[tenant])))
        totals = await self._store.read_spend(names)
        for i, tenant in enumerate(tenants):
            day, month = totals[2 * i], totals[2 * i + 1]
            now = periods(at, zones[tenant])
            for d in self._queued:  # debits made here and not yet sent
                if d.tenant == tenant:
                    when = periods(d.at, zones[tenant])
                    month += d.cost_usd if when.month == now.month else 0.0
                    day += d.cost_usd if when.day == now.day else 0.0
            self.set_spend(tenant, at, day, month)
