"""The dashboard's learning panel: audit counts and the false-hit bound per scope, read from the
same registry families /metrics renders."""

from __future__ import annotations

import pytest

from hybrid_gateway.dashboard import take_snapshot
from hybrid_gateway.learning.bound import FalseHitTracker
from hybrid_gateway.learning.metrics import AuditMetrics, RouterUpdateMetrics
from hybrid_gateway.learning.store import AuditRow
from hybrid_gateway.observability.metrics import GatewayMetrics


def cache_audit(n: int, scope: str, verdict: str) -> AuditRow:
    return AuditRow(f"r{n}", 0.0, "acme", "cache", "marks", None, verdict, None, None, "light",
                    0.97, scope, 0.002, None)  # fmt: skip


def test_audits_and_bounds_per_scope_on_the_snapshot() -> None:
    metrics = GatewayMetrics()
    assert take_snapshot(metrics, uptime_s=1).learning is None  # no audit metrics registered
    audits = AuditMetrics(metrics.registry)
    updates = RouterUpdateMetrics(metrics.registry)
    tracker = FalseHitTracker(audits.bound)
    for n in range(50):
        row = cache_audit(n, "tenant:acme", "a_worse" if n < 1 else "equivalent")
        tracker.verdict(row)
        audits.finished("cache", row.verdict or "none", 0.002)
    audits.finished("router", "a_worse", 0.01)
    audits.skip("router", "cap")
    updates.version.set(3)
    learning = take_snapshot(metrics, uptime_s=1).as_json()["learning"]
    scope = {"scope": "tenant:acme", "audited_hits": 50, "false_hits": 1,
             "bound": pytest.approx(0.1050, abs=1e-3)}  # fmt: skip
    assert list(learning["scopes"]) == [scope]
    assert {(a["kind"], a["outcome"]): a["audits"] for a in learning["audits"]} == {
        ("cache", "a_worse"): 1, ("cache", "equivalent"): 49, ("router", "a_worse"): 1,
    }  # fmt: skip
    assert learning["skipped"] == 1 and learning["cost_usd"] == pytest.approx(0.11)
    assert learning["router_model_version"] == 3 and learning["cache_threshold"] is None
