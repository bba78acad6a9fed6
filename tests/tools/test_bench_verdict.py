"""The Project X verdict and issue 21's goal on hand-made figures; late rows from a request log."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from hybrid_gateway.tools.bench.late import LateFigures, late_of, read_audit_costs, read_late_rows
from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.bench.verdict import (
    ISSUE_GOALS,
    PROJECT_X,
    StageFigures,
    figures_of,
    verdict,
    verdict_json,
)

PASSING = StageFigures(
    requests=1000, simple_share=0.82, p95_s=1.2, simple_p95_s=0.8, complex_p95_s=4.2,
    relative_cost=0.33, cache_hit_rate=0.35, exact_hit_rate=0.2, semantic_hit_rate=0.15,
    availability=0.997, quality=0.992, simple_quality=0.995, complex_quality=0.98,
    false_hit_rate=0.004, fallbacks={"timeout": 3, "failover": 2}, late_deliveries=3,
)  # fmt: skip


def by_key(figures: StageFigures, targets: Any = PROJECT_X) -> dict[str, bool | None]:
    return {line.key: line.passed for line in verdict(figures, targets)}


def test_every_project_x_line_passes_on_passing_figures() -> None:
    judged = by_key(PASSING)
    assert list(judged) == [t.key for t in PROJECT_X]
    required = {"simple_share", "simple_p95_s", "complex_p95_s", "cost_reduction",
                "cache_hit_rate", "availability"}  # fmt: skip
    assert {k for k, v in judged.items() if v is True} == required
    # reported only: no target, never judged
    assert {k for k, v in judged.items() if v is None} == set(judged) - required
    assert all(by_key(PASSING, ISSUE_GOALS).values())


@pytest.mark.parametrize(
    ("change", "failing"),
    [
        ({"simple_share": 0.79}, "simple_share"),
        ({"simple_p95_s": 1.0}, "simple_p95_s"),  # strictly under 1 s
        ({"complex_p95_s": 5.0}, "complex_p95_s"),
        ({"relative_cost": 0.60}, "cost_reduction"),  # a 40 % reduction is not > 40 %
        ({"cache_hit_rate": 0.30}, "cache_hit_rate"),
        ({"availability": 0.995}, "availability"),
    ],
)
def test_each_project_x_bound_fails_at_its_edge(change: dict[str, float], failing: str) -> None:
    judged = by_key(replace(PASSING, **change))  # type: ignore[arg-type]
    assert {k for k, v in judged.items() if v is False} == {failing}


@pytest.mark.parametrize(
    ("change", "failing"),
    [
        ({"relative_cost": 0.3501}, "relative_cost"),
        ({"p95_s": 1.51}, "p95_s"),
        ({"quality": 0.989}, "quality"),
        ({"availability": 0.9949}, "availability"),
        ({"false_hit_rate": 0.0101}, "false_hit_rate"),
    ],
)
def test_issue_goal_fails_past_its_bound(change: dict[str, float], failing: str) -> None:
    judged = by_key(replace(PASSING, **change), ISSUE_GOALS)  # type: ignore[arg-type]
    assert {k for k, v in judged.items() if v is False} == {failing}


def test_issue_goal_bounds_are_inclusive() -> None:
    edge = replace(PASSING, relative_cost=0.35, p95_s=1.5, quality=0.99, availability=0.995,
                   false_hit_rate=0.01)  # fmt: skip
    assert all(by_key(edge, ISSUE_GOALS).values())


def test_a_missing_figure_is_not_judged() -> None:
    lines = verdict(replace(PASSING, complex_p95_s=None, relative_cost=None))
    judged = {line.key: line for line in lines}
    assert judged["complex_p95_s"].passed is None and judged["complex_p95_s"].shown == "n/a"
    assert judged["cost_reduction"].passed is None


def test_verdict_json_rounds_and_shows() -> None:
    rows = {row["key"]: row for row in verdict_json(verdict(PASSING))}
    assert rows["simple_p95_s"] == {
        "key": "simple_p95_s", "label": "simple p95", "value": 0.8, "shown": "0.80 s",
        "target": "< 1 s", "pass": True,
    }  # fmt: skip
    assert rows["cost_reduction"]["value"] == 0.67 and rows["cost_reduction"]["target"] == "> 40 %"
    assert rows["fallback_total"]["shown"] == "5" and rows["fallback_total"]["pass"] is None
    assert rows["exact_hit_rate"]["label"] == "of which exact"


def stage(**changes: Any) -> dict[str, Any]:
    """A hand-made ``results[i]`` of a report: 200 requests, 150 simple and 50 complex."""
    group = {"latency_ms": {"p50": 300.0, "p95": 900.0, "p99": 1200.0}, "quality_rate": 1.0}
    row: dict[str, Any] = {
        "requests": 200,
        "latency_ms": {"p50": 400.0, "p95": 1500.0, "p99": 3000.0},
        "relative_cost": 0.4, "cache_hit_rate": 0.25, "success_rate": 0.99,
        "quality_rate": 0.98, "false_hit_rate": 0.02,
        "complexity": {
            "simple": group,
            "complex": {**group, "latency_ms": {"p50": 2000.0, "p95": 4800.0, "p99": 6e3},
                        "quality_rate": 0.9},
        },
        "project_x_counts": {
            "served_without_heavy": 160, "hits_by_kind": {"exact": 30, "semantic": 20},
            "fallbacks": {"timeout": 4}, "late_deliveries": 3,
        },
    }  # fmt: skip
    return {**row, **changes}


def test_figures_of_a_stage_object() -> None:
    fig = figures_of(stage())
    assert fig.requests == 200
    assert fig.simple_share == pytest.approx(0.8)
    assert (fig.p95_s, fig.simple_p95_s, fig.complex_p95_s) == (1.5, 0.9, 4.8)
    assert fig.cost_reduction == pytest.approx(0.6)
    assert (fig.exact_hit_rate, fig.semantic_hit_rate) == (0.15, 0.1)
    assert (fig.simple_quality, fig.complex_quality) == (1.0, 0.9)
    assert fig.fallback_total == 4 and fig.late_total == 3
    judged = by_key(fig)
    assert judged["cache_hit_rate"] is False and judged["availability"] is False
    assert judged["complex_p95_s"] is True and judged["simple_share"] is True


def test_figures_of_a_stage_without_complex_items() -> None:
    row = stage()
    row["complexity"] = {"simple": row["complexity"]["simple"]}
    fig = figures_of(row)
    assert fig.complex_p95_s is None and fig.complex_quality is None
    assert by_key(fig)["complex_p95_s"] is None


def result(request_id: str | None) -> RequestResult:
    return RequestResult(
        item="i", start_s=0.0, latency_ms=1.0, ttft_ms=None, status=200, error_code=None,
        stream=False, lane="light", channel="c", rule="deadline:heavy", cache="miss",
        cost_usd=0.001, mark_group=None, mark_ok=None, fallback="timeout", request_id=request_id,
    )  # fmt: skip


def test_late_rows_are_joined_to_their_stage(tmp_path: Path) -> None:
    log = tmp_path / "requests.sqlite3"
    with sqlite3.connect(log) as db:
        db.execute("CREATE TABLE requests (request_id TEXT, status INTEGER, cost_usd REAL, "
                   "fallback TEXT)")  # fmt: skip
        db.executemany(
            "INSERT INTO requests VALUES (?, ?, ?, ?)",
            [("a", 200, 0.001, "timeout"), ("a.late", 200, 0.02, "late"),
             ("b", 200, 0.001, "timeout"), ("b.late", 503, None, "late"),
             ("c.late", 200, 0.5, "late"), ("d", 200, 0.01, None)],
        )  # fmt: skip
    rows = read_late_rows(log)
    assert set(rows) == {"a", "b", "c"}
    figures = late_of([result("a"), result("b"), result("d"), result(None)], rows)
    assert (figures.deliveries, figures.failed) == (1, 1)
    assert figures.cost_usd == pytest.approx(0.02)
    assert late_of([result("d")], rows) == LateFigures()
    assert read_late_rows(tmp_path / "absent.sqlite3") == {}


def test_audit_spend_is_joined_to_its_stage(tmp_path: Path) -> None:
    log = tmp_path / "requests.sqlite3"
    with sqlite3.connect(log) as db:
        db.execute("CREATE TABLE requests (request_id TEXT)")
    assert read_audit_costs(log) == {}  # a log written with audits off
    with sqlite3.connect(log) as db:
        db.execute("CREATE TABLE audits (request_id TEXT PRIMARY KEY, cost_usd REAL NOT NULL)")
        db.executemany("INSERT INTO audits VALUES (?, ?)", [("a", 0.03), ("x", 0.5)])
    audits = read_audit_costs(log)
    figures = late_of([result("a"), result("d"), result(None)], {}, audits)
    assert figures.audits == 1 and figures.audit_cost_usd == pytest.approx(0.03)
    assert (figures.deliveries, figures.cost_usd) == (0, 0.0)
    assert read_audit_costs(tmp_path / "absent.sqlite3") == {}
