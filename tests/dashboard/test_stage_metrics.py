"""Latency per stage and lane, route decisions and the model label, as rendered on /metrics."""

from __future__ import annotations

import time

from hybrid_gateway.observability.metrics import GatewayMetrics
from hybrid_gateway.types import RequestRecord, RouteDecision


def test_each_stage_is_observed_per_lane() -> None:
    metrics = GatewayMetrics()
    record = RequestRecord(
        request_id="r", started_at=time.time(), model="auto", stream=True,
        route=RouteDecision("heavy", "heavy-c", "default"),
        latency_ms=900.0, upstream_ms=850.0, ttft_ms=300.0, extra={"queue_ms": 40.0},
    )  # fmt: skip
    metrics.observe(record)
    text = metrics.render().decode()
    assert 'hybrid_gateway_queue_wait_seconds_bucket{lane="heavy",le="0.05"} 1' in text
    assert 'hybrid_gateway_queue_wait_seconds_bucket{lane="heavy",le="0.025"} 0' in text
    ttft = 'hybrid_gateway_time_to_first_token_seconds_bucket{lane="heavy",channel="heavy-c",'
    assert ttft + 'le="0.5"} 1' in text and ttft + 'le="0.25"} 0' in text
    assert (
        'hybrid_gateway_upstream_duration_seconds_count{lane="heavy",channel="heavy-c"} 1' in text
    )
    assert 'hybrid_gateway_request_duration_seconds_count{lane="heavy",stream="true"} 1' in text
    assert 'hybrid_gateway_route_decisions_total{lane="heavy",rule="default"} 1.0' in text


def test_a_request_without_a_lane_queue_has_no_queue_sample() -> None:
    metrics = GatewayMetrics()
    metrics.observe(RequestRecord(request_id="r", started_at=time.time(), model="auto"))
    assert "hybrid_gateway_queue_wait_seconds_count" not in metrics.render().decode()


def test_an_unknown_model_id_does_not_become_a_label_value() -> None:
    """Clients choose model ids; an unserved one must not grow the registry."""
    metrics = GatewayMetrics()
    for i in range(3):
        record = RequestRecord(
            request_id="r", started_at=time.time(), model=f"made-up-{i}", status=404,
            error_code="model_not_found",
        )  # fmt: skip
        metrics.observe(record)
    text = metrics.render().decode()
    assert "made-up" not in text
    assert 'model="unknown",lane="none",channel="none",cache="miss",status="404"} 3.0' in text


def test_a_late_answer_adds_its_cost_to_its_tenant_not_a_request() -> None:
    metrics = GatewayMetrics()
    late = RequestRecord(
        request_id="r.late", started_at=time.time(), model="auto", tenant="acme", app="wiki",
        route=RouteDecision("heavy", "heavy-c", "default"), cost_usd=0.25, fallback="late",
    )  # fmt: skip
    metrics.observe_late(late)
    text = metrics.render().decode()
    labels = 'tenant="acme",app="wiki",lane="heavy",channel="heavy-c",model="auto"'
    assert f"hybrid_gateway_tenant_cost_usd_total{{{labels}}} 0.25" in text
    assert "hybrid_gateway_tenant_requests_total{" not in text
