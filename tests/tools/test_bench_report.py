"""`bench run`'s report: stable JSON keys, relative cost, the seed's table, files and plots."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hybrid_gateway.tools.bench.late import LateFigures
from hybrid_gateway.tools.bench.report import (
    REFERENCE,
    SCHEMA,
    RunInfo,
    StageRun,
    build_report,
    render_markdown,
    write_report,
)
from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.overhead.procstat import ProcessUsage
from hybrid_gateway.tools.workload.schema import Labels

STAMP = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
LABELS = {
    f"i{n}": Labels(
        light_ok=n % 2 == 0, heavy_ok=True, complexity="simple" if n % 2 == 0 else "complex",
        category="c", source="s", group=f"g{n}", lang="en", outcome="assumed",
    )
    for n in range(4)
}  # fmt: skip
STAGE_KEYS = {
    "strategy", "stage", "concurrency", "duration_s", "requests", "qps", "latency_ms", "ttft_ms",
    "success_rate", "quality_rate", "cache_hit_rate", "false_hit_rate", "cost_usd",
    "cost_per_1k_usd", "relative_cost", "counts", "gateway_cpu_ms_per_request",
    "gateway_rss_mib_max", "lanes", "complexity", "loadgen", "results_file", "workload_passes",
    "resent_share", "first_send_cache_hit_rate", "item_range", "project_x", "project_x_counts",
}  # fmt: skip


def rows(cost: float, lane: str, cache: str = "miss") -> list[RequestResult]:
    return [
        RequestResult(
            item=f"i{n}", start_s=n * 0.1, latency_ms=100.0 * (n + 1), ttft_ms=None, status=200,
            error_code=None, stream=False, lane=lane, channel=None, rule=None, cache=cache,
            cost_usd=cost, mark_group=f"g{n}", mark_ok=True,
        )
        for n in range(4)
    ]  # fmt: skip


def stage(strategy: str, conc: int, cost: float, lane: str, cache: str = "miss") -> StageRun:
    usage = ProcessUsage(cpu_s=0.004, peak_rss_mib=80.0, rss_hwm_mib=None, samples=3)
    summary = {"requests": 4, "errors": 0, "duration_s": 2.0}
    return StageRun(strategy, f"c{conc}", conc, rows(cost, lane, cache), summary, usage)


def info() -> RunInfo:
    return RunInfo(
        started_at=STAMP, finished_at=STAMP, argv=["hybrid-gateway", "bench", "run"],
        settings={"duration_s": 2.0, "warmup_s": 0.0, "mode": "closed"},
        workload={"path": "w.jsonl", "items": 4, "simple_share": 0.5, "meta": {}},
        emulators={"light": {"command": "hybrid-gateway emulate --profile light", "profile": {}}},
    )  # fmt: skip


def report() -> dict[str, Any]:
    stages = [
        stage("heavy-only", 4, 0.002, "heavy"),
        stage("hybrid-cache", 4, 0.0005, "light", cache="exact"),
        stage("heavy-only", 8, 0.004, "heavy"),
        stage("hybrid-cache", 8, 0.001, "light"),
    ]
    return build_report(info(), stages, LABELS)


def test_stage_keys_and_relative_cost() -> None:
    rep = report()
    assert rep["schema"] == SCHEMA
    results = rep["results"]
    assert isinstance(results, list)
    for r in results:
        assert set(r) >= STAGE_KEYS
        assert set(r["latency_ms"]) == {"p50", "p95", "p99"}
    heavy4, cache4, heavy8, cache8 = results
    assert heavy4["relative_cost"] == 1.0 and heavy8["relative_cost"] == 1.0
    assert cache4["relative_cost"] == pytest.approx(0.25)
    assert cache8["relative_cost"] == pytest.approx(0.25)
    assert heavy4["cost_per_1k_usd"] == pytest.approx(2.0)
    assert heavy4["qps"] == pytest.approx(2.0)  # 4 requests / the loadgen's 2.0 s
    assert heavy4["latency_ms"]["p50"] == pytest.approx(250.0)
    assert heavy4["gateway_cpu_ms_per_request"] == pytest.approx(1.0)  # 4 ms CPU / 4 requests
    assert cache4["cache_hit_rate"] == 1.0 and cache4["false_hit_rate"] == 0.0
    assert heavy4["lanes"]["heavy"]["requests"] == 4
    assert set(heavy4["complexity"]) == {"simple", "complex"}
    assert rep["table_stage"] == "c8"
    assert heavy4["workload_passes"] == 1.0
    assert not any("WARNING" in note for note in rep["notes"])


def test_a_wrapped_workload_is_flagged() -> None:
    rep = build_report(
        info(), [stage("heavy-only", 4, 0.002, "heavy")], dict(list(LABELS.items())[:2])
    )
    assert rep["results"][0]["workload_passes"] == 2.0
    assert rep["results"][0]["resent_share"] == 0.0  # no first-send flags: all first sends


def test_resent_items_are_flagged() -> None:
    run = stage("hybrid-cache", 4, 0.0, "light", cache="exact")
    run = dataclasses.replace(run, first_send=(True, True, False, False))
    rep = build_report(info(), [run], LABELS)
    r = rep["results"][0]
    assert r["resent_share"] == 0.5
    assert r["cache_hit_rate"] == 1.0 and r["first_send_cache_hit_rate"] == 1.0
    assert any(note.startswith("WARNING: up to 50%") for note in rep["notes"])


def stretch(strategy: str, first: int) -> StageRun:
    """A stage that sent items w{first} .. w{first + 3}."""
    run = stage(strategy, 4, 0.002, "heavy")
    moved = [dataclasses.replace(r, item=f"w{first + n:06d}") for n, r in enumerate(run.results)]
    return dataclasses.replace(run, results=moved)


def test_strategies_that_replayed_different_stretches_are_flagged() -> None:
    labels = {f"w{n:06d}": LABELS["i0"] for n in range(1, 200)}
    apart = build_report(info(), [stretch("heavy-only", 1), stretch("full", 101)], labels)
    assert apart["results"][1]["item_range"] == ["w000101", "w000104"]
    [note] = [n for n in apart["notes"] if "different stretches" in n]
    assert "at stage c4" in note and "heavy-only w000001-w000004, full w000101-w000104" in note
    same = build_report(info(), [stretch("heavy-only", 1), stretch("full", 2)], labels)
    assert not any("different stretches" in n for n in same["notes"])


def test_a_workload_whose_mix_drifts_is_noted() -> None:
    drifting = dataclasses.replace(
        info(), workload={**info().workload, "meta": {"exhausted": {"cmath": 6011}}}
    )
    rep = build_report(drifting, [stage("heavy-only", 4, 0.002, "heavy")], LABELS)
    assert any("ran out of cmath at item w006011" in note for note in rep["notes"])


def test_markdown_has_the_seed_table() -> None:
    rep = report()
    table = str(rep["markdown_table"])
    assert "| strategy | p50 | p95 | success | quality | false hits | cost/1k USD |" in table
    assert "| heavy-only | 0.25 s | 0.39 s | 100.0% | 100.0% | n/a | 4.000 | 100% |" in table
    assert "| hybrid-cache |" in table and "25%" in table
    assert table.count("seed:") == len(REFERENCE)
    assert "c4" not in table.splitlines()[0]
    md = render_markdown(rep)
    assert "## Every stage" in md and "exact cache" in md and "--profile light" in md


def test_write_report_writes_json_markdown_and_plots(tmp_path: Path) -> None:
    paths = write_report(report(), tmp_path / "out", STAMP, plots=True)
    names = [p.name for p in paths]
    assert names == [
        "bench-20250102-030405.json", "bench-20250102-030405.md",
        "bench-20250102-030405-latency.png", "bench-20250102-030405-cost.png",
        "bench-20250102-030405-article.png",
    ]  # fmt: skip
    loaded = json.loads(paths[0].read_text())
    assert loaded["results"][1]["relative_cost"] == pytest.approx(0.25)
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "latency.png" in paths[1].read_text()


def test_late_answers_count_in_the_cost_and_the_verdict_counts() -> None:
    late = LateFigures(deliveries=2, failed=1, cost_usd=0.003, audits=1, audit_cost_usd=0.001)
    full = dataclasses.replace(stage("full", 4, 0.0005, "light"), late=late)
    rep = build_report(info(), [stage("heavy-only", 4, 0.002, "heavy"), full], LABELS)
    heavy, row = rep["results"]
    # 4 x 0.0005 + 0.003 late + 0.001 audit = 0.006 for 4 requests: 1.5 per 1k, against
    # heavy-only's 2.0
    assert row["cost_usd"] == pytest.approx(0.006)
    assert row["cost_per_1k_usd"] == pytest.approx(1.5)
    assert row["relative_cost"] == pytest.approx(0.75)
    counts = row["project_x_counts"]
    assert (
        counts["served_without_heavy"] == 4
        and heavy["project_x_counts"]["served_without_heavy"] == 0
    )
    assert (counts["late_deliveries"], counts["late_failed"]) == (2, 1)
    assert (counts["audits"], counts["audit_cost_usd"]) == (1, 0.001)
    px = {line["key"]: line for line in row["project_x"]}
    assert (
        px["cost_reduction"]["value"] == pytest.approx(0.25)
        and px["cost_reduction"]["pass"] is False
    )
    assert px["simple_share"]["value"] == 1.0 and px["late_total"]["value"] == 2
    goal = rep["goal"]
    assert (goal["strategy"], goal["stage"], goal["met"]) == ("full", "c4", False)
    assert "issue_goal" in row and "issue_goal" not in heavy
    md = render_markdown(rep)
    assert "Goal of issue 21 for `full` at stage c4: NOT met" in md
    assert "| inference cost reduction | > 40 % | 0.0% **FAIL** | 25.0% **FAIL** |" in md
