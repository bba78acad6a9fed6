"""`bench degrade`: its configs parse, its figures count what they claim, its report renders."""

from __future__ import annotations

from pathlib import Path

from hybrid_gateway.config import parse_config
from hybrid_gateway.tools.bench.degrade_plan import (
    gateway_config,
    stage_figures,
    write_synthetic_workload,
)
from hybrid_gateway.tools.bench.degrade_report import render_markdown
from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.workload.schema import read_workload

UPSTREAMS = {role: f"http://127.0.0.1:{port}/v1" for role, port in
             (("light", 1), ("heavy", 2), ("heavy-backup", 3))}  # fmt: skip


def result(status: int, latency: float, code: str | None = None, fallback: str | None = None
           ) -> RequestResult:  # fmt: skip
    return RequestResult("d1", 0.0, latency, None, status, code, False, "heavy", "heavy", None,
                         "bypass", None, None, None, fallback)  # fmt: skip


def test_every_scenario_config_is_a_valid_gateway_config(tmp_path: Path) -> None:
    for scenario in ("errors", "errors-no-breaker", "isolation", "overload"):
        config = parse_config(gateway_config(scenario, UPSTREAMS, tmp_path / "log.sqlite3"))
        assert config.server.host == "127.0.0.1"
        assert not config.cache.exact.enabled  # no cache hit can flatter a figure
    errors = parse_config(gateway_config("errors", UPSTREAMS, tmp_path / "log.sqlite3"))
    assert errors.lanes["heavy"].backup == "heavy-backup" and errors.lanes["heavy"].retry_on_backup


def test_the_synthetic_workload_is_unique_and_evenly_spaced(tmp_path: Path) -> None:
    items = read_workload(write_synthetic_workload(tmp_path / "w.jsonl", rate_per_s=4, seed=1))
    assert len({item.messages[0]["content"] for item in items}) == len(items)
    assert [item.arrival_ms for item in items[:3]] == [0.0, 250.0, 500.0]
    assert {item.stream for item in items} == {True, False}


def test_stage_figures_separate_admitted_refused_and_failed() -> None:
    results = [result(200, 100.0), result(200, 300.0, fallback="failover"),
               result(503, 1.0, "lane_queue_full"), result(429, 1.0, "rate_limit_exceeded"),
               result(502, 5.0, "upstream_status_502")]  # fmt: skip
    fig = stage_figures(results, duration_s=2.0)
    assert (fig["requests"], fig["succeeded"], fig["refused_429_503"], fig["other_errors"]) == (
        5, 2, 2, 1
    )  # fmt: skip
    assert fig["success_rate"] == 0.4 and fig["admitted_per_s"] == 1.0
    assert fig["latency_ms"]["p50"] == 200.0  # admitted answers only
    assert fig["fallbacks"] == {"failover": 1}
    assert fig["errors_by_code"]["503:lane_queue_full"] == 1


def test_the_report_renders_every_scenario() -> None:
    fig = stage_figures([result(200, 100.0)], 1.0)
    lane = {
        "capacity": fig,
        "overload_2x": fig,
        "recovery_half": fig,
        "admitted_p95_vs_capacity_p95": 1.0,
        "sla_p95_bound_ms": 1100.0,
        "keeps_sla": True,
    }
    report = {
        "started_at": "now",
        "scenarios": {
            "errors": {"what": "w", "stage": fig, "pass": True},
            "isolation": {"what": "w", "heavy_capacity": fig, "light_heavy_idle": fig,
                          "light_heavy_saturated": fig, "heavy_saturated": fig,
                          "light_p95_ratio": 1.0, "pass": True},
            "overload": {"what": "w", "lanes": {"light": lane, "heavy": lane},
                         "refusals_probed": {"probes": 3, "refused": 1,
                                             "refused_without_retry_after": 0},
                         "gateway_overload": {"peak_rss_mib": 80.0},
                         "gateway_recovery": {"peak_rss_mib": 80.0},
                         "recovered": True, "pass": True},
        },
    }  # fmt: skip
    text = render_markdown(report)
    assert "Target success >= 99.5 %: **yes**" in text
    assert "Light p95 ratio (saturated / idle): **1.000**" in text
    assert "gateway max RSS during overload: 80.0 MiB" in text
