from __future__ import annotations

import time

import pytest

from hybrid_gateway.dashboard import BreakerView, histogram_quantile, take_snapshot
from hybrid_gateway.observability.metrics import GatewayMetrics
from hybrid_gateway.resilience.breaker import BreakerState
from hybrid_gateway.types import CacheOutcome, RequestRecord, RouteDecision, Usage


def record(
    lane: str | None,
    latency_ms: float,
    *,
    cache: CacheOutcome = CacheOutcome.MISS,
    status: int = 200,
    cost: float = 0.0,
) -> RequestRecord:
    route = RouteDecision(lane, f"{lane}-c", f"rule-{lane}") if lane else None
    return RequestRecord(
        request_id="r", started_at=time.time(), model="auto", route=route, cache=cache,
        status=status, cost_usd=cost, latency_ms=latency_ms, usage=Usage(1, 1),
    )  # fmt: skip


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    bounds = (0.1, 0.5, 1.0)
    # 10 in (0, 0.1], 10 in (0.1, 0.5], 0 in (0.5, 1], 0 above
    counts = [10, 10, 0, 0]
    assert histogram_quantile(0.5, bounds, counts) == pytest.approx(0.1)
    assert histogram_quantile(0.75, bounds, counts) == pytest.approx(0.3)
    assert histogram_quantile(0.25, bounds, counts) == pytest.approx(0.05)
    # A rank in the +Inf bucket answers the highest finite bound.
    assert histogram_quantile(0.99, bounds, [0, 0, 1, 9]) == 1.0
    assert histogram_quantile(0.5, bounds, [0, 0, 0, 0]) is None


def test_snapshot_totals_shares_and_percentiles() -> None:
    metrics = GatewayMetrics()
    for _ in range(6):
        metrics.observe(record("light", 40, cost=0.001))
    for _ in range(2):
        metrics.observe(record("light", 2, cache=CacheOutcome.EXACT))
    metrics.observe(record("heavy", 900, cost=0.01))
    metrics.observe(record(None, 1, status=400))
    metrics.feedback_received("heavy", "miss", "down", "wrong")
    metrics.state_change("heavy-c", BreakerState.CLOSED, BreakerState.OPEN)

    snap = take_snapshot(metrics, uptime_s=12.0)
    assert (snap.requests, snap.cache_hits, snap.errors) == (10, 2, 1)
    assert snap.hit_rate == pytest.approx(0.2)
    assert snap.cost_usd == pytest.approx(0.016)
    assert snap.cost_per_1k == pytest.approx(1.6)
    assert (snap.feedback_up, snap.feedback_down) == (0, 1)
    assert [lane.lane for lane in snap.lanes] == ["light", "heavy", "none"]
    light = snap.lanes[0]
    assert (light.requests, light.cache_hits) == (8, 2)
    assert light.share == pytest.approx(0.8)
    assert light.p50_s is not None and 0.025 <= light.p50_s <= 0.05
    assert snap.lanes[1].p95_s is not None and 0.5 < snap.lanes[1].p95_s <= 1.0
    assert [(r.rule, r.decisions) for r in snap.rules] == [("rule-light", 8), ("rule-heavy", 1)]
    assert snap.breakers == (BreakerView("heavy-c", "open"),)
    assert snap.as_json()["lanes"][0]["lane"] == "light"


def test_an_empty_gateway_has_no_rates() -> None:
    snap = take_snapshot(GatewayMetrics(), uptime_s=0.0)
    assert (snap.requests, snap.hit_rate, snap.cost_per_1k, snap.lanes) == (0, None, None, ())
