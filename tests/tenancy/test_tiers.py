"""The tier stage: allowed lanes, and the budget policy at the cap (downgrade or refuse)."""

from __future__ import annotations

from datetime import datetime

import pytest

from hybrid_gateway.errors import InsufficientQuota, PermissionDenied
from hybrid_gateway.tenancy.budgets import BudgetBook
from hybrid_gateway.tenancy.settings import BudgetConfig, TenantConfig
from hybrid_gateway.tenancy.tiers import TierPolicy
from hybrid_gateway.types import RequestRecord, RouteDecision

LANES = {"light": "light-ch", "heavy": "heavy-ch", "premium": "premium-ch"}
MODELS: dict[str, str | None] = {"auto": None, "light": "light", "heavy": "heavy"}
HEAVY = RouteDecision("heavy", "heavy-ch", "default")
LIGHT = RouteDecision("light", "light-ch", "how-to")


class Wall:
    def __init__(self, iso: str) -> None:
        self.now = datetime.fromisoformat(iso).timestamp()

    def __call__(self) -> float:
        return self.now


def policy(tenants: dict[str, TenantConfig], wall: Wall) -> tuple[TierPolicy, BudgetBook]:
    book = BudgetBook({n: t.budget for n, t in tenants.items() if t.budget is not None})
    return TierPolicy(tenants, LANES, MODELS, book, wall), book


def record(tenant: str) -> RequestRecord:
    return RequestRecord(request_id="req_1", started_at=0.0, tenant=tenant)


def test_an_explicit_model_on_a_forbidden_lane_is_403() -> None:
    tiers, _ = policy({"basic": TenantConfig(lanes=("light",))}, Wall("2026-11-29T00:00:00Z"))
    with pytest.raises(PermissionDenied) as exc:
        tiers.check_model("basic", "heavy")
    assert exc.value.status == 403 and exc.value.code == "model_not_allowed"
    assert exc.value.param == "model"
    tiers.check_model("basic", "light")
    tiers.check_model("basic", "auto")  # routed: the tier stage picks an allowed lane
    tiers.check_model("other", "heavy")  # no lanes declared: all allowed


def test_routed_traffic_to_a_forbidden_lane_moves_to_the_first_allowed_one() -> None:
    tiers, _ = policy({"basic": TenantConfig(lanes=("light", "premium"))},
                   Wall("2026-11-29T00:00:00+00:00"))  # fmt: skip
    moved = tiers.apply(record("basic"), HEAVY)
    assert moved == RouteDecision("light", "light-ch", "default+tier:heavy->light")
    assert moved.header() == "lane=light; channel=light-ch; rule=default+tier:heavy->light"
    assert tiers.apply(record("basic"), LIGHT) is LIGHT
    assert tiers.apply(record("other"), HEAVY) is HEAVY
    assert tiers.active


def test_budget_downgrade_across_a_day_boundary() -> None:
    wall = Wall("2026-11-29T23:00:00+00:00")
    budget = BudgetConfig(daily=0.01, on_exceed="downgrade", downgrade_lane="light")
    tiers, book = policy({"acme": TenantConfig(budget=budget)}, wall)
    first = record("acme")
    assert tiers.apply(first, HEAVY) is HEAVY and first.fallback is None
    book.debit("acme", 0.02, wall())
    over = record("acme")
    moved = tiers.apply(over, HEAVY)
    assert moved == RouteDecision("light", "light-ch", "default+budget:heavy->light",
                                  downgraded=True)  # fmt: skip
    assert over.fallback == "budget"
    already_light = record("acme")
    assert tiers.apply(already_light, LIGHT) is LIGHT and already_light.fallback is None
    wall.now += 3600  # 00:00 the next day: the daily cap is fresh
    nextday = record("acme")
    assert tiers.apply(nextday, HEAVY) is HEAVY and nextday.fallback is None


def test_budget_refuse_across_a_month_boundary() -> None:
    wall = Wall("2026-11-30T23:59:00+00:00")
    tiers, book = policy({"acme": TenantConfig(budget=BudgetConfig(monthly=1.0))}, wall)
    book.debit("acme", 1.0, wall())
    with pytest.raises(InsufficientQuota) as exc:
        tiers.apply(record("acme"), LIGHT)
    assert exc.value.status == 402 and exc.value.code == "insufficient_quota"
    assert "monthly" in exc.value.message
    wall.now += 120  # 2026-12-01 00:01
    assert tiers.apply(record("acme"), LIGHT) is LIGHT


def test_lanes_then_budget() -> None:
    wall = Wall("2026-11-29T12:00:00+00:00")
    budget = BudgetConfig(daily=0.0, on_exceed="downgrade", downgrade_lane="light")
    tiers, _ = policy({"acme": TenantConfig(lanes=("premium", "light"), budget=budget)}, wall)
    over = record("acme")
    moved = tiers.apply(over, HEAVY)
    assert moved.lane == "light"
    assert moved.rule == "default+tier:heavy->premium+budget:premium->light"
    assert over.fallback == "budget" and moved.downgraded
