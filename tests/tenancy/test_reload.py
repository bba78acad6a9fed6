"""Hot reload of tenants and limits (tenancy/reload.py): quotas change, state stays.

Buckets keep their level (clamped to a new burst), budget spend is kept and only the caps move,
new tenants get fresh buckets, removed tenants' keys are refused; with ``stores.backend: redis``
the buckets and spend in Redis stay too.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from hybrid_gateway.config import GatewayConfig
from hybrid_gateway.errors import AuthenticationFailed, InsufficientQuota, RateLimited
from hybrid_gateway.observability.request_log import SqliteRequestLog
from hybrid_gateway.resilience.breaker import BreakerSettings
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.stores.settings import StoresConfig
from hybrid_gateway.stores.shared import SharedState, build_shared_state
from hybrid_gateway.tenancy.admission import Tenancy, build_tenancy
from hybrid_gateway.tenancy.budgets import BudgetBook
from hybrid_gateway.tenancy.keys import KeyStore
from hybrid_gateway.tenancy.ratelimit import RateLimiter
from hybrid_gateway.tenancy.reload import prepare_tenancy
from hybrid_gateway.tenancy.settings import BudgetConfig, RateQuota
from hybrid_gateway.types import ChatRequest, RequestRecord, RouteDecision
from tests.stores.redis_server import RedisServer, unique_prefix
from tests.tenancy.test_admission import config

NOW = datetime.fromisoformat("2026-11-29T12:00:00+00:00").timestamp()
HEAVY = RouteDecision("heavy", "a", "default")
BREAKER = BreakerSettings(window_s=30, min_requests=4, error_rate=0.5, open_s=10)


def chat(text: str = "hi") -> ChatRequest:
    messages = [{"role": "user", "content": text}]
    return ChatRequest("auto", messages, False, False, {"model": "auto", "messages": messages})


def record(tenant: str = "default", cost: float = 0.0) -> RequestRecord:
    rec = RequestRecord(request_id=f"req_{cost}", started_at=NOW, tenant=tenant)
    rec.cost_usd = cost
    return rec


def admitted(tenancy: Tenancy, tenant: str = "default") -> bool:
    try:
        tenancy.admit(chat(), record(tenant))
    except RateLimited:
        return False
    return True


def reload(tenancy: Tenancy, new: GatewayConfig, shared: SharedState | None = None) -> None:
    prepare_tenancy(tenancy, new, shared=shared).apply()


@pytest.fixture
def made() -> Iterator[list[Tenancy]]:
    tenancies: list[Tenancy] = []
    yield tenancies
    for tenancy in tenancies:
        tenancy.aclose()


def build(made: list[Tenancy], cfg: GatewayConfig, clock: ManualClock, **kw: Any) -> Tenancy:
    keys_path = kw.pop("keys_path", Path("/nonexistent/keys.sqlite3"))
    tenancy = build_tenancy(cfg, keys_path=keys_path, clock=clock, log_query=kw.pop("log", None),
                            wall=lambda: NOW, **kw)  # fmt: skip
    made.append(tenancy)
    return tenancy


# -- token buckets ------------------------------------------------------------------------------
async def test_a_bucket_keeps_its_level_clamped_to_the_new_burst_then_refills_at_the_new_rate() -> (
    None
):
    clock = ManualClock()
    old = RateLimiter({"acme": RateQuota(requests_per_s=1, burst=10)}, None, clock)
    for _ in range(3):
        assert old.admit("acme", 0).allowed  # level 7
    smaller = old.reconfigured({"acme": RateQuota(requests_per_s=1, burst=5)}, None)
    bucket = smaller._own["acme"].requests
    assert bucket is not None and bucket.level == 5.0  # clamped to the new burst
    larger = smaller.reconfigured({"acme": RateQuota(requests_per_s=2, burst=20)}, None)
    bucket = larger._own["acme"].requests
    assert bucket is not None and bucket.level == 5.0  # not refilled by the reload itself
    await clock.advance(1.0)
    assert bucket.level == 7.0  # refills at the new rate, 2/s
    assert old._own["acme"].requests is not bucket  # the old limiter is left as it was


async def test_time_before_the_reload_refills_at_the_new_rate_and_debt_is_kept() -> None:
    clock = ManualClock()
    old = RateLimiter({"acme": RateQuota(tokens_per_min=60)}, None, clock)  # 1 token/s
    assert old.admit("acme", 60).allowed
    old.correct("acme", 40)  # the answer used 40 more: 40 in debt
    await clock.advance(10.0)  # not yet refilled: the bucket's last update is 10 s ago
    new = old.reconfigured({"acme": RateQuota(tokens_per_min=600)}, None)  # 10 tokens/s
    decision = new.admit("acme", 100)
    assert not decision.allowed and decision.limit == "tenant:tokens"
    assert decision.retry_after_s == pytest.approx(4.0)  # -40 + 10 s x 10/s = 60: 40 short


def test_new_tenants_get_full_buckets_removed_ones_fall_back_to_the_global_bucket() -> None:
    clock = ManualClock()
    one = RateQuota(requests_per_s=0.001, burst=1)
    old = RateLimiter({"acme": one}, RateQuota(requests_per_s=0.001, burst=3), clock)
    assert old.admit("acme", 0).allowed  # acme 0/1, global 2/3
    new = old.reconfigured({"beta": one}, RateQuota(requests_per_s=0.001, burst=3))
    assert new.admit("beta", 0).allowed  # a fresh bucket; global 1/3 (carried over)
    assert new.admit("acme", 0).allowed  # now only the global bucket applies: 0/3
    refused = new.admit("acme", 0)
    assert not refused.allowed and refused.limit == "global:requests"


# -- budgets -----------------------------------------------------------------------------------
def test_spend_is_kept_across_a_cap_change_and_a_removed_budget_is_not_counted() -> None:
    book = BudgetBook({"acme": BudgetConfig(daily=1.0), "beta": BudgetConfig(daily=1.0)})
    book.debit("acme", 0.6, NOW)
    book.debit("beta", 0.9, NOW)
    book.adopt(book.plan({"acme": BudgetConfig(daily=0.5)}, query=None, at=NOW))
    assert book.exceeded("acme", NOW) == "daily"  # 0.6 spent, the cap moved under it
    assert book.spent("acme", NOW) == pytest.approx((0.6, 0.6))
    assert book.spent("beta", NOW) == (0.0, 0.0) and book.exceeded("beta", NOW) is None
    book.adopt(book.plan({"acme": BudgetConfig(daily=2.0)}, query=None, at=NOW))
    assert book.exceeded("acme", NOW) is None
    assert book.spent("acme", NOW) == pytest.approx((0.6, 0.6))


def test_a_new_budget_or_time_zone_sums_the_spend_from_the_request_log(tmp_path: Path) -> None:
    log = SqliteRequestLog(tmp_path / "requests.sqlite3", flush_interval_s=60)
    for i, (tenant, cost) in enumerate([("acme", 0.3), ("beta", 0.8)]):
        rec = record(tenant, cost)
        rec.request_id = f"r{i}"
        log.write(rec)
    log.flush()
    book = BudgetBook({"acme": BudgetConfig(daily=1.0)})
    book.debit("acme", 0.3, NOW)
    budgets = {"acme": BudgetConfig(daily=1.0, timezone="Asia/Shanghai"),
               "beta": BudgetConfig(daily=0.5)}  # fmt: skip
    plan = book.plan(budgets, query=log.query, at=NOW)
    assert book.spent("beta", NOW) == (0.0, 0.0)  # nothing changes before adopt
    book.adopt(plan)
    log.close()
    assert book.spent("beta", NOW) == pytest.approx((0.8, 0.8))
    assert book.exceeded("beta", NOW) == "daily"
    assert book.spent("acme", NOW) == pytest.approx((0.3, 0.3))  # summed again, not doubled


# -- the facade --------------------------------------------------------------------------------
def test_a_lowered_budget_refuses_the_next_request_with_spend_kept(made: list[Tenancy]) -> None:
    tenancy = build(made, config(tenants={"default": {"budget": {"daily": 1.0}}}), ManualClock())
    tenancy.settle(record(cost=0.4))
    assert tenancy.tiers.apply(record(), HEAVY) is HEAVY
    reload(tenancy, config(tenants={"default": {"budget": {"daily": 0.3}}}))
    with pytest.raises(InsufficientQuota):
        tenancy.tiers.apply(record(), HEAVY)
    reload(tenancy, config(tenants={"default": {"budget": {"daily": 0.5}}}))
    assert tenancy.tiers.apply(record(), HEAVY) is HEAVY
    tenancy.settle(record(cost=0.1))  # 0.5: the spend before the reloads still counts
    with pytest.raises(InsufficientQuota):
        tenancy.tiers.apply(record(), HEAVY)


async def test_a_raised_rate_limit_applies_to_the_next_request(made: list[Tenancy]) -> None:
    clock = ManualClock()
    slow = {"default": {"rate": {"requests_per_s": 0.001, "burst": 1}}}
    tenancy = build(made, config(tenants=slow), clock)
    assert admitted(tenancy) and not admitted(tenancy)
    reload(tenancy, config(tenants={"default": {"rate": {"requests_per_s": 10, "burst": 3}}}))
    assert not admitted(tenancy)  # the empty bucket stays empty: a reload is no refill ...
    await clock.advance(0.1)
    assert admitted(tenancy)  # ... but it refills at 10/s now, not once in 1000 s
    reload(tenancy, config())  # no quota any more
    assert all(admitted(tenancy) for _ in range(10))


def test_a_new_tenant_is_admitted_and_a_removed_ones_key_refused(
    made: list[Tenancy], tmp_path: Path
) -> None:
    store = KeyStore(tmp_path / "keys.sqlite3")
    acme = store.create("acme", "wiki", "", now=NOW)
    beta = store.create("beta", "bot", "", now=NOW)
    store.close()
    auth = {"enabled": True, "keys_path": "unused", "admin_key_env": None}
    tenancy = build(made, config(auth=auth, tenants={"acme": {}}), ManualClock(),
                    keys_path=tmp_path / "keys.sqlite3")  # fmt: skip
    with pytest.raises(AuthenticationFailed, match="no longer in the gateway's config"):
        tenancy.authenticate(f"Bearer {beta.key}")
    reload(tenancy, config(auth=auth, tenants={"beta": {"rate": {"requests_per_s": 5}}}))
    assert tenancy.authenticate(f"Bearer {beta.key}").tenant == "beta"
    assert admitted(tenancy, "beta")
    with pytest.raises(AuthenticationFailed, match="no longer in the gateway's config"):
        tenancy.authenticate(f"Bearer {acme.key}")


def test_tiers_start_when_a_reload_adds_the_first_budget(made: list[Tenancy]) -> None:
    tenancy = build(made, config(), ManualClock())
    assert not tenancy.tiers.active
    tiers = prepare_tenancy(
        tenancy, config(tenants={"default": {"budget": {"daily": 0.0}}}), shared=None
    ).apply()
    assert tiers is tenancy.tiers and tiers.active
    with pytest.raises(InsufficientQuota):
        tiers.apply(record(), HEAVY)


# -- the shared store (a private redis-server) -------------------------------------------------
async def test_shared_buckets_and_spend_stay_in_redis(made: list[Tenancy], tmp_path: Path) -> None:
    redis = RedisServer(tmp_path)
    redis.start()
    clock = ManualClock(1000.0)
    stores = StoresConfig(backend="redis", redis_url=redis.url, key_prefix=unique_prefix())
    shared = build_shared_state(stores, clock=clock, breaker=BREAKER, wall=lambda: NOW)
    assert shared is not None
    quota = {"requests_per_s": 0.001, "burst": 3}  # Redis TIME cannot refill it during the test
    first = config(tenants={"default": {"rate": quota, "budget": {"daily": 1.0}}})
    tenancy = build(made, first, clock, shared=shared)
    try:
        await tenancy.admit_async(chat(), record())  # 2 of 3 left, in Redis
        tenancy.settle(record(cost=0.4))
        await shared.sync_once()  # the debit goes to Redis
        book = tenancy.parts.book
        lower = {"rate": {**quota, "burst": 1}, "budget": {"daily": 0.3}}
        reload(tenancy, config(tenants={"default": lower}), shared)
        assert tenancy.parts.book is book and shared.budgets is book  # the sync loop's book
        await tenancy.admit_async(chat(), record())  # Redis' level 2, clamped to 1, taken ...
        with pytest.raises(RateLimited):  # ... and nothing left: not reset to a full bucket
            await tenancy.admit_async(chat(), record())
        await shared.sync_once()  # the view is read back from Redis
        assert book.spent("default", NOW) == pytest.approx((0.4, 0.4))
        with pytest.raises(InsufficientQuota):
            tenancy.tiers.apply(record(), HEAVY)
    finally:
        await shared.aclose()
        redis.stop()
