"""Results of `bench run`: per strategy x stage figures, the seed's table, JSON, Markdown, PNG.

The JSON is the record (one object, stable keys, ``schema`` versioned, documented in
benchmarks/README.md); the Markdown and the plots are drawn from that same object.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from hybrid_gateway.tools.bench.floor import engines_of, latency_floor
from hybrid_gateway.tools.bench.held_back import held_back, repeat_ceiling
from hybrid_gateway.tools.bench.late import LateFigures
from hybrid_gateway.tools.bench.plots import draw_plots
from hybrid_gateway.tools.bench.report_md import render_markdown, strategy_tables
from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.bench.stats import (
    GroupStats,
    Scored,
    group_by,
    is_cache_hit,
    per_request_ms,
    ratio,
    score,
    stage_span_s,
    summarise,
)
from hybrid_gateway.tools.bench.strategies import STRATEGY_NOTES
from hybrid_gateway.tools.bench.verdict import ISSUE_GOALS, figures_of, verdict, verdict_json
from hybrid_gateway.tools.overhead.procstat import ProcessUsage
from hybrid_gateway.tools.workload.schema import Labels, WorkloadItem

__all__ = [
    "REFERENCE",
    "SCHEMA",
    "FailedStrategy",
    "RunInfo",
    "StageRun",
    "build_report",
    "group_json",
    "render_markdown",  # re-exported from report_md
    "stage_json",
    "write_report",
]

SCHEMA = "hybrid-gateway/bench-run/1"
GOAL_STRATEGY = "full"  # the strategy issue 21's goal is judged on
JsonDict = dict[str, Any]

# The seed's results at 100 concurrency (REQUIREMENTS.md section 8): p50 s, p95 s, success,
# cost per 1k requests (USD), relative cost.
REFERENCE: tuple[JsonDict, ...] = (
    {"strategy": "heavy model only", "p50_s": 1.8, "p95_s": 8.5, "success_rate": 0.982,
     "cost_per_1k_usd": 2.20, "relative_cost": 1.00},
    {"strategy": "hybrid routing, no cache, no degradation", "p50_s": 0.6, "p95_s": 3.1,
     "success_rate": 0.978, "cost_per_1k_usd": 1.30, "relative_cost": 0.59},
    {"strategy": "hybrid routing + cache + degradation", "p50_s": 0.4, "p95_s": 1.8,
     "success_rate": 0.991, "cost_per_1k_usd": 0.86, "relative_cost": 0.39},
)  # fmt: skip


@dataclass(frozen=True)
class StageRun:
    """One measured stage of one strategy, as the runner collected it."""

    strategy: str
    stage: str  # "c20", "c50", ... or "open"
    concurrency: int | None  # None in open mode
    results: Sequence[RequestResult]
    loadgen: Mapping[str, Any]  # the load generator's one-line JSON summary
    gateway_usage: ProcessUsage | None
    results_file: str = ""
    # per result: the first time its item id reached this gateway (empty: unknown, all first)
    first_send: Sequence[bool] = ()
    # the item ids this gateway was sent before the stage (its warm-up, earlier stages)
    sent_before: frozenset[str] = frozenset()
    # the slow lane's answers to this stage's deadline fallbacks (read after the gateway stops)
    late: LateFigures = field(default_factory=LateFigures)


@dataclass(frozen=True)
class RunInfo:
    """Everything about the run that is not a measurement."""

    started_at: datetime
    finished_at: datetime
    argv: Sequence[str]
    settings: JsonDict
    workload: JsonDict
    emulators: JsonDict
    notes: Sequence[str] = field(default_factory=tuple)


@dataclass(frozen=True)
class FailedStrategy:
    """A strategy that gave no results: its gateway did not start, or the strategy broke."""

    strategy: str
    cause: str  # one line
    logs: str = ""  # the folder of its processes' stdout/stderr


def group_json(stats: GroupStats) -> JsonDict:
    """The figures every group (stage, lane, complexity) reports, under stable keys."""
    return {
        "requests": stats.requests,
        "qps": _round(stats.qps, 2),
        "latency_ms": {k: _round(v, 1) for k, v in stats.latency_ms.items()},
        "ttft_ms": {k: _round(v, 1) for k, v in stats.ttft_ms.items()},
        "success_rate": _round(stats.success_rate, 4),
        "quality_rate": _round(stats.quality_rate, 4),
        "cache_hit_rate": _round(stats.cache_hit_rate, 4),
        "false_hit_rate": _round(stats.false_hit_rate, 4),
        "cost_usd": round(stats.cost_usd, 6),
        "cost_per_1k_usd": _round(stats.cost_per_1k_usd, 4),
        "counts": {
            "successes": stats.successes,
            "quality_ok": stats.quality_ok,
            "cache_hits": stats.cache_hits,
            "false_hits": stats.false_hits,
            "streams": stats.streams,
            "missing_cost": stats.missing_cost,
            "unknown_items": stats.unknown_items,
        },
    }


def stage_json(stage: StageRun, labels: Mapping[str, Labels], default_s: float) -> JsonDict:
    """One strategy x stage: overall figures, per lane, per complexity, gateway usage."""
    duration = _stage_duration(stage, default_s)
    scored = score(stage.results, labels)
    usage = stage.gateway_usage
    cpu = per_request_ms(usage.cpu_s, len(scored)) if usage else None
    return {
        "strategy": stage.strategy,
        "stage": stage.stage,
        "concurrency": stage.concurrency,
        "duration_s": round(duration, 3),
        **_with_late_cost(group_json(summarise(scored, duration)), stage.late),
        "workload_passes": _round(ratio(len(scored), len(labels)), 2),
        **_resent(stage),
        "relative_cost": None,  # filled in by build_report against heavy-only
        "gateway_cpu_ms_per_request": _round(cpu, 4),
        "gateway_rss_mib_max": _round(usage.peak_rss_mib if usage else None, 1),
        "lanes": _groups(scored, duration, lambda s: s.result.lane or "none"),
        "complexity": _groups(scored, duration, _complexity),
        "project_x_counts": _project_x_counts(stage),
        "loadgen": dict(stage.loadgen),
        "results_file": stage.results_file,
    }


def _with_late_cost(figures: JsonDict, late: LateFigures) -> JsonDict:
    """The stage's cost includes what its late answers and its audits cost: the heavy model
    did that work."""
    extra = late.cost_usd + late.audit_cost_usd
    if extra > 0 and figures["requests"] > 0:
        figures["cost_usd"] = round(figures["cost_usd"] + extra, 6)
        figures["cost_per_1k_usd"] = _round(figures["cost_usd"] / figures["requests"] * 1e3, 4)
    return figures


def _project_x_counts(stage: StageRun) -> JsonDict:
    """The counts the Project X verdict needs beyond the stage's figures (verdict.py)."""
    results = stage.results
    hits = [r for r in results if is_cache_hit(r)]
    return {
        "served_without_heavy": sum(
            1 for r in results
            if is_cache_hit(r) or (r.lane == "light" and r.fallback != "timeout")
        ),
        "hits_by_kind": dict(sorted(Counter(str(r.cache) for r in hits).items())),
        "fallbacks": dict(sorted(Counter(r.fallback for r in results if r.fallback).items())),
        "late_deliveries": stage.late.deliveries,
        "late_failed": stage.late.failed,
        "late_cost_usd": round(stage.late.cost_usd, 6),
        "audits": stage.late.audits,
        "audit_cost_usd": round(stage.late.audit_cost_usd, 6),
    }  # fmt: skip


def build_report(
    info: RunInfo,
    stages: Sequence[StageRun],
    labels: Mapping[str, Labels],
    failed: Sequence[FailedStrategy] = (),
    items: Mapping[str, WorkloadItem] | None = None,
) -> JsonDict:
    """The report of the stages that ran; ``failed``: the strategies that gave none (a partial
    run: the report lists them under ``failed``, each with its cause); ``items``: the workload's,
    for each stage's latency floor (floor.py) and repeat ceiling (held_back.py)."""
    results = [stage_json(s, labels, float(info.settings["duration_s"])) for s in stages]
    engines = engines_of(info.emulators)
    if items is not None:
        for stage, r in zip(stages, results, strict=True):
            if engines is not None:
                r["latency_floor"] = latency_floor(stage.results, items, engines, stage.sent_before)
            r["repeat_ceiling"] = repeat_ceiling(stage.results, items, stage.sent_before)
    _fill_relative_cost(results)
    for r in results:
        r["project_x"] = verdict_json(verdict(figures_of(r)))
        if r["strategy"] == GOAL_STRATEGY:
            r["issue_goal"] = verdict_json(verdict(figures_of(r), ISSUE_GOALS))
    report: JsonDict = {
        "schema": SCHEMA,
        "started_at": info.started_at.isoformat(timespec="seconds"),
        "finished_at": info.finished_at.isoformat(timespec="seconds"),
        "command": " ".join(info.argv),
        "settings": info.settings,
        "workload": info.workload,
        "emulators": info.emulators,
        "strategies": {
            name: STRATEGY_NOTES.get(name, "") for name in dict.fromkeys(s.strategy for s in stages)
        },
        "results": results,
        "failed": [dataclasses.asdict(f) for f in failed],
        "table_stage": _table_stage(results),
        "table_stages": _table_stages(results),
        "goal": _goal(results),
        "reference": list(REFERENCE),
        "notes": [
            *_default_notes(),
            *_wrap_notes(results),
            *_stretch_notes(results, info.workload),
            *info.notes,
        ],
    }
    report["markdown_table"] = "\n".join(strategy_tables(report))
    return report


def _goal(results: Sequence[JsonDict]) -> JsonDict | None:
    """Issue 21's goal, judged on ``full`` at the open-loop stage (else its highest stage)."""
    rows = [r for r in results if r["strategy"] == GOAL_STRATEGY]
    if not rows:
        return None
    row = next((r for r in rows if r["stage"] == "open"), None) or max(
        rows, key=lambda r: r["concurrency"] or 0
    )
    lines = row["issue_goal"]
    return {
        "strategy": GOAL_STRATEGY,
        "stage": row["stage"],
        "lines": lines,
        "met": all(ln["pass"] for ln in lines),
        "latency_floor": row.get("latency_floor"),
        "held_back": held_back(results, row),
    }


def _fill_relative_cost(results: list[JsonDict]) -> None:
    baseline = {r["stage"]: r["cost_per_1k_usd"] for r in results if r["strategy"] == "heavy-only"}
    for r in results:
        r["relative_cost"] = _round(ratio(r["cost_per_1k_usd"], baseline.get(r["stage"])), 4)


def _table_stage(results: Sequence[JsonDict]) -> str | None:
    """The stage the strategy table shows: the highest concurrency (or the open-loop stage)."""
    if not results:
        return None
    top = max(results, key=lambda r: r["concurrency"] or 0)
    return str(top["stage"])


def _table_stages(results: Sequence[JsonDict]) -> list[str]:
    """The highest closed-loop stage and the open-loop stage, those that ran."""
    closed = [r for r in results if r["concurrency"] is not None]
    stages = [str(max(closed, key=lambda r: r["concurrency"])["stage"])] if closed else []
    if any(r["stage"] == "open" for r in results):
        stages.append("open")
    return stages


def _groups(scored: Sequence[Scored], duration: float, key: Any) -> JsonDict:
    return {name: group_json(summarise(g, duration)) for name, g in group_by(scored, key).items()}


def _complexity(item: Scored) -> str:
    return "unknown" if item.labels is None else item.labels.complexity


def _stage_duration(stage: StageRun, default_s: float) -> float:
    """The longer of the loadgen's stage duration and first send to last answer (the drain)."""
    value = stage.loadgen.get("duration_s")
    reported = float(value) if isinstance(value, int | float) and value > 0 else 0.0
    return max(reported, stage_span_s(stage.results) or 0.0) or default_s


def _default_notes() -> list[str]:
    return [
        "Each strategy runs on fresh emulators and a fresh gateway; its stages run in order on "
        "the same processes after a discarded warm-up, so caches are warm as in steady state.",
        "Latency percentiles: linear interpolation between closest ranks, over every request "
        "of the stage (errors and client time-outs included).",
        "quality = HTTP 2xx AND the answer's mark names the item's paraphrase group AND (the "
        "mark is ok OR the heavy model would not have answered it well either).",
        "hybrid-cache is routing rules + exact cache only; `full` is the whole article "
        "(examples/gateway-full.yaml) and the full-no-* rows each remove one part of it.",
        "relative cost = cost per 1k / heavy-only's at the same stage; a stage's cost includes "
        "the late answers of its deadline fallbacks and its audits (shadow answer + judge): "
        "the heavy model did that work.",
    ]


def _resent(stage: StageRun) -> JsonDict:
    """Share of re-sent item ids, and the cache hit rate over first sends only."""
    first = list(stage.first_send) or [True] * len(stage.results)
    fresh = [r for r, f in zip(stage.results, first, strict=True) if f]
    hits = sum(1 for r in fresh if is_cache_hit(r))
    ids = sorted(r.item for r in stage.results)
    return {
        "resent_share": _round(ratio(len(first) - len(fresh), len(first)), 4),
        "first_send_cache_hit_rate": _round(ratio(hits, len(fresh)), 4),
        "item_range": [ids[0], ids[-1]] if ids else None,  # the stretch of the workload sent
    }


def _wrap_notes(results: Sequence[JsonDict]) -> list[str]:
    resent = max((r["resent_share"] or 0.0 for r in results), default=0.0)
    if resent <= 0.0:
        return []
    return [
        f"WARNING: up to {resent:.0%} of a stage's requests re-sent an item id the gateway had "
        "already seen (in a warm-up, an earlier stage, or because the closed loop wrapped "
        "around the workload). Those verbatim re-sends inflate cache_hit_rate and deflate the "
        "cached strategy's cost; first_send_cache_hit_rate counts only first sends (the "
        "workload's own repeats). Use a larger workload (--size), a shorter --duration or "
        "--max-requests for cache figures that reflect the workload alone."
    ]


def _stretch_notes(results: Sequence[JsonDict], workload: JsonDict) -> list[str]:
    """Where strategies replayed different stretches of one stage, and where the mix drifts."""
    notes: list[str] = []
    exhausted = (workload.get("meta") or {}).get("exhausted") or {}
    if exhausted:
        ran_out = ", ".join(f"{name} at item w{at:06d}" for name, at in exhausted.items())
        notes.append(
            f"The workload's mix drifts: it ran out of {ran_out} (workload build), so a later "
            "stretch of it has another mix than an earlier one."
        )
    by_stage: dict[str, list[JsonDict]] = {}
    for r in results:
        if r.get("item_range"):
            by_stage.setdefault(str(r["stage"]), []).append(r)
    for stage, rows in by_stage.items():
        spans = [span for r in rows if (span := _span(r["item_range"])) is not None]
        if len(spans) < 2 or len(spans) < len(rows):
            continue
        if min(_overlap(spans[0], span) for span in spans[1:]) < 0.5:
            stretches = ", ".join(
                f"{r['strategy']} {r['item_range'][0]}-{r['item_range'][1]}" for r in rows
            )
            notes.append(
                f"WARNING: at stage {stage} the strategies replayed different stretches of the "
                f"workload ({stretches}): each continues where its own previous stage stopped. "
                "Where the mix drifts, figures that depend on it (quality, p95) are not "
                "comparable across them; `--mode open` alone gives every strategy the same "
                "requests."
            )
    return notes


def _span(item_range: Sequence[str]) -> tuple[int, int] | None:
    """Item ids ``w000123`` as numbers (None for ids of another form)."""
    try:
        return int(item_range[0].lstrip("w")), int(item_range[1].lstrip("w"))
    except ValueError:
        return None


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> float:
    """The share of the shorter stretch that the other one covers."""
    shared = min(a[1], b[1]) - max(a[0], b[0]) + 1
    return max(shared, 0) / max(1, min(a[1] - a[0], b[1] - b[0]) + 1)


def write_report(report: JsonDict, out_dir: Path, stamp: datetime, plots: bool) -> list[Path]:
    """Write ``bench-STAMP.{json,md}`` (and the PNG plots) into ``out_dir``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    base = out_dir / f"bench-{stamp:%Y%m%d-%H%M%S}"
    pngs = draw_plots(report, base) if plots else []
    json_path, md_path = base.with_suffix(".json"), base.with_suffix(".md")
    json_path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    md_path.write_text(render_markdown(report, pngs))
    return [json_path, md_path, *pngs]


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
