"""What the metrics, the dashboard snapshot and the request log show of pooled endpoints."""

from __future__ import annotations

from hybrid_gateway.dashboard.snapshot import EndpointView, take_snapshot
from hybrid_gateway.observability.log_rows import COLUMNS, record_row
from hybrid_gateway.observability.metrics import GatewayMetrics
from hybrid_gateway.types import EndpointChoice, RequestRecord, RouteDecision


def test_endpoint_metrics_render_and_reach_the_dashboard() -> None:
    metrics = GatewayMetrics()
    for name in ("gpu1", "gpu2"):
        metrics.endpoint_state("pool", name, "healthy")
    metrics.endpoint_load("pool", "gpu1", 3)
    metrics.endpoint_result("pool", "gpu2", "failure")
    metrics.endpoint_state("pool", "gpu2", "ejected")
    text = metrics.render().decode()
    assert 'hybrid_gateway_endpoint_up{channel="pool",endpoint="gpu2"} 0' in text
    assert 'hybrid_gateway_endpoint_ejections_total{channel="pool",endpoint="gpu2"} 1' in text
    assert ('hybrid_gateway_endpoint_attempts_total{channel="pool",endpoint="gpu2",'
            'outcome="failure"} 1') in text  # fmt: skip
    snap = take_snapshot(metrics, uptime_s=1.0)
    assert snap.endpoints == (EndpointView("pool", "gpu1", True, 3),
                              EndpointView("pool", "gpu2", False, 0))  # fmt: skip


def test_the_log_row_names_the_endpoint_only_on_the_channel_that_answered() -> None:
    record = RequestRecord(request_id="r", started_at=0.0)
    choice = EndpointChoice("pool", "gpu2", "prefix_affinity", "match=0.91")
    record.route = RouteDecision("light", "pool", "default", endpoint=choice)
    row = dict(zip(COLUMNS, record_row(record), strict=True))
    assert (row["endpoint"], row["endpoint_reason"]) == ("gpu2", "prefix_affinity; match=0.91")
    assert record.route.header().endswith("endpoint=gpu2; policy=prefix_affinity; match=0.91")
    record.route = RouteDecision("light", "backup", "default", endpoint=choice)  # failed over
    row = dict(zip(COLUMNS, record_row(record), strict=True))
    assert (row["endpoint"], row["endpoint_reason"]) == (None, None)
    assert "endpoint=" not in record.route.header()
