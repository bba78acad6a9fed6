"""The leak-watch gauges the soak reads from /metrics."""

from __future__ import annotations

from hybrid_gateway.observability.metrics import GatewayMetrics


def test_loop_gauges_render_tasks_and_idle_connections_per_channel() -> None:
    metrics = GatewayMetrics()
    metrics.observe_loop(7, {"light": 3, "heavy": 0})
    lines = metrics.render().decode().splitlines()
    assert "hybrid_gateway_asyncio_tasks 7.0" in lines
    assert 'hybrid_gateway_upstream_idle_connections{channel="light"} 3.0' in lines
    assert 'hybrid_gateway_upstream_idle_connections{channel="heavy"} 0.0' in lines
