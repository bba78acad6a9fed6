"""grafana/hybrid-gateway.json queries only documented metric names, with their own labels."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.dashboard.metrics_doc import Documented, documented, series_names

DASHBOARD = Path(__file__).resolve().parents[2] / "grafana" / "hybrid-gateway.json"
_METRIC = re.compile(r"\bhybrid_gateway_[a-z0-9_]+\b")
_GROUPING = re.compile(r"\b(?:by|without|ignoring|on)\s*\(([^)]*)\)")
_MATCHER = re.compile(r"\{([^}]*)\}")


def exprs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            else:
                yield from exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from exprs(item)


def labels_used(expr: str) -> set[str]:
    used: set[str] = set()
    for group in _GROUPING.findall(expr):
        used |= {name.strip() for name in group.split(",") if name.strip()}
    for matchers in _MATCHER.findall(expr):
        used |= set(re.findall(r"([a-z_]+)\s*(?:=~|!~|!=|=)", matchers))
    return used


def test_the_dashboard_is_grafana_json_with_panels() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["uid"] == "hybrid-gateway" and dashboard["schemaVersion"] >= 36
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    assert len(list(exprs(dashboard))) >= 15


def test_every_expr_uses_documented_metrics_and_their_labels() -> None:
    docs = documented()
    by_series: dict[str, Documented] = {}
    for doc in docs.values():
        for name in series_names(doc):
            by_series[name] = doc
    seen: set[str] = set()
    for expr in exprs(json.loads(DASHBOARD.read_text(encoding="utf-8"))):
        metrics = _METRIC.findall(expr)
        assert metrics, f"no gateway metric in {expr!r}"
        allowed = {"le"}
        for name in metrics:
            assert name in by_series, f"{name} (in {expr!r}) is not a documented metric series"
            allowed |= by_series[name].labels
            seen.add(by_series[name].name)
        unknown = labels_used(expr) - allowed
        assert not unknown, f"labels {sorted(unknown)} in {expr!r} are not on {metrics}"
    for core in ("hybrid_gateway_requests_total", "hybrid_gateway_request_duration_seconds",
                 "hybrid_gateway_cost_usd_total", "hybrid_gateway_breaker_state"):  # fmt: skip
        assert core in seen, f"the dashboard shows {core}"


def test_the_label_check_catches_a_wrong_label() -> None:
    expr = 'sum by (tenant) (rate(hybrid_gateway_requests_total{cache="exact"}[5m]))'
    assert labels_used(expr) == {"tenant", "cache"}
