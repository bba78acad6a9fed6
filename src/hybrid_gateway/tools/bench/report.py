"""Results of `bench run`: per strategy x stage figures, the seed's table, JSON, Markdown, PNG.

The JSON is the record (one object, stable keys, ``schema`` versioned, documented in
benchmarks/README.md); the Markdown and the plots are drawn from that same object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

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
from hybrid_gateway.tools.overhead.procstat import ProcessUsage
from hybrid_gateway.tools.workload.schema import Labels

__all__ = [
    "REFERENCE",
    "SCHEMA",
    "RunInfo",
    "StageRun",
    "build_report",
    "group_json",
    "render_markdown",
    "stage_json",
    "write_report",
]

SCHEMA = "hybrid-gateway/bench-run/1"
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
        **group_json(summarise(scored, duration)),
        "workload_passes": _round(ratio(len(scored), len(labels)), 2),
        **_resent(stage),
        "relative_cost": None,  # filled in by build_report against heavy-only
        "gateway_cpu_ms_per_request": _round(cpu, 4),
        "gateway_rss_mib_max": _round(usage.peak_rss_mib if usage else None, 1),
        "lanes": _groups(scored, duration, lambda s: s.result.lane or "none"),
        "complexity": _groups(scored, duration, _complexity),
        "loadgen": dict(stage.loadgen),
        "results_file": stage.results_file,
    }


def build_report(
    info: RunInfo, stages: Sequence[StageRun], labels: Mapping[str, Labels]
) -> JsonDict:
    results = [stage_json(s, labels, float(info.settings["duration_s"])) for s in stages]
    _fill_relative_cost(results)
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
        "table_stage": _table_stage(results),
        "reference": list(REFERENCE),
        "notes": [*_default_notes(), *_wrap_notes(results), *info.notes],
    }
    report["markdown_table"] = "\n".join(_strategy_table(report))
    return report


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
        "hybrid-cache uses what exists today: routing rules + exact cache. The semantic cache, "
        "the classifier and degradation are not built yet, so it is not the seed's "
        "'hybrid + cache + degradation'.",
        "relative cost = cost per 1k / heavy-only's at the same stage.",
    ]


def _resent(stage: StageRun) -> JsonDict:
    """Share of re-sent item ids, and the cache hit rate over first sends only."""
    first = list(stage.first_send) or [True] * len(stage.results)
    fresh = [r for r, f in zip(stage.results, first, strict=True) if f]
    hits = sum(1 for r in fresh if is_cache_hit(r))
    return {
        "resent_share": _round(ratio(len(first) - len(fresh), len(first)), 4),
        "first_send_cache_hit_rate": _round(ratio(hits, len(fresh)), 4),
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


def _strategy_table(report: JsonDict) -> list[str]:
    stage = report["table_stage"]
    rows = [
        f"Strategy table at stage {stage} (seed reference rows: 100 concurrency)",
        "",
        "| strategy | p50 | p95 | success | quality | false hits | cost/1k USD | relative cost |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        if r["stage"] != stage:
            continue
        lat = r["latency_ms"]
        rows.append(
            f"| {r['strategy']} | {_secs(lat['p50'])} | {_secs(lat['p95'])} | "
            f"{_pct(r['success_rate'])} | {_pct(r['quality_rate'])} | "
            f"{_pct(r['false_hit_rate'])} | {_fmt(r['cost_per_1k_usd'], '.3f')} | "
            f"{_pct(r['relative_cost'], '.0%')} |"
        )
    for ref in report["reference"]:
        rows.append(
            f"| seed: {ref['strategy']} | {ref['p50_s']:.1f} s | {ref['p95_s']:.1f} s | "
            f"{ref['success_rate']:.1%} | n/a | n/a | {ref['cost_per_1k_usd']:.2f} | "
            f"{ref['relative_cost']:.0%} |"
        )
    return rows


def render_markdown(report: JsonDict, plots: Sequence[Path] = ()) -> str:
    wl, st = report["workload"], report["settings"]
    lines = [
        f"# bench run, {report['started_at']}",
        "",
        f"`{report['command']}`",
        "",
        f"Workload `{wl['path']}`: {wl['items']} items, simple share {_pct(wl['simple_share'])}; "
        f"mode {st['mode']}, {st['duration_s']:g} s per stage after {st['warmup_s']:g} s warm-up.",
        "",
        *[f"- **{name}**: {note}" for name, note in report["strategies"].items()],
        "",
        report["markdown_table"],
        "",
        "## Every stage",
        "",
        *_stage_table(report["results"]),
        "",
        "## Per lane and per complexity",
        "",
        *_lane_table(report["results"]),
        "",
        "## Emulator settings",
        "",
        *_emulator_lines(report["emulators"]),
        "",
        *[f"![{p.stem}]({p.name})" for p in plots],
        "",
        *[f"- {note}" for note in report["notes"]],
    ]
    return "\n".join(lines).rstrip() + "\n"


def _stage_table(results: Sequence[JsonDict]) -> list[str]:
    rows = [
        "| strategy | stage | requests | QPS | p50 ms | p95 ms | p99 ms | TTFT p50 | TTFT p95 "
        "| success | quality | cache hits | hits on 1st sends | re-sent | false hits | cost/1k "
        "| relative | GW CPU ms/req | GW RSS MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lat, ttft = r["latency_ms"], r["ttft_ms"]
        rows.append(
            f"| {r['strategy']} | {r['stage']} | {r['requests']} | {_fmt(r['qps'], '.1f')} | "
            f"{_fmt(lat['p50'], '.0f')} | {_fmt(lat['p95'], '.0f')} | {_fmt(lat['p99'], '.0f')} | "
            f"{_fmt(ttft['p50'], '.0f')} | {_fmt(ttft['p95'], '.0f')} | {_pct(r['success_rate'])} "
            f"| {_pct(r['quality_rate'])} | {_pct(r['cache_hit_rate'])} | "
            f"{_pct(r['first_send_cache_hit_rate'])} | {_pct(r['resent_share'], '.0%')} | "
            f"{_pct(r['false_hit_rate'])} | {_fmt(r['cost_per_1k_usd'], '.3f')} | "
            f"{_pct(r['relative_cost'], '.0%')} | {_fmt(r['gateway_cpu_ms_per_request'], '.3f')} "
            f"| {_fmt(r['gateway_rss_mib_max'], '.0f')} |"
        )
    return rows


def _lane_table(results: Sequence[JsonDict]) -> list[str]:
    rows = [
        "| strategy | stage | by | group | requests | p50 ms | p95 ms | p99 ms | success "
        "| quality | cache hits | cost/1k |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        for by in ("lanes", "complexity"):
            for name, g in r[by].items():
                lat = g["latency_ms"]
                rows.append(
                    f"| {r['strategy']} | {r['stage']} | {by} | {name} | {g['requests']} | "
                    f"{_fmt(lat['p50'], '.0f')} | {_fmt(lat['p95'], '.0f')} | "
                    f"{_fmt(lat['p99'], '.0f')} | {_pct(g['success_rate'])} | "
                    f"{_pct(g['quality_rate'])} | {_pct(g['cache_hit_rate'])} | "
                    f"{_fmt(g['cost_per_1k_usd'], '.3f')} |"
                )
    return rows


def _emulator_lines(emulators: Mapping[str, Any]) -> list[str]:
    lines = []
    for lane, facts in emulators.items():
        prof = facts.get("profile", {})
        engine = ", ".join(f"{k}={v}" for k, v in prof.get("engine", {}).items())
        lines.append(
            f"- {lane}: `{facts.get('command', '')}`; engine {engine}; output tokens "
            f"{prof.get('min_output_tokens')}..{prof.get('max_output_tokens')}"
        )
    return lines


def write_report(report: JsonDict, out_dir: Path, stamp: datetime, plots: bool) -> list[Path]:
    """Write ``bench-STAMP.{json,md}`` (and the PNG plots) into ``out_dir``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    base = out_dir / f"bench-{stamp:%Y%m%d-%H%M%S}"
    pngs = draw_plots(report, base) if plots else []
    json_path, md_path = base.with_suffix(".json"), base.with_suffix(".md")
    json_path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    md_path.write_text(render_markdown(report, pngs))
    return [json_path, md_path, *pngs]


def draw_plots(report: JsonDict, base: Path) -> list[Path]:
    """``<base>-latency.png`` (p50/p95/p99 per strategy) and ``<base>-cost.png`` vs stage."""
    from matplotlib.figure import Figure  # Agg canvas; no pyplot, no global backend switch

    by_strategy: dict[str, list[JsonDict]] = {}
    for r in report["results"]:
        by_strategy.setdefault(r["strategy"], []).append(r)
    latency, cost = (
        base.with_name(base.name + "-latency.png"),
        base.with_name(base.name + "-cost.png"),
    )
    fig = Figure(figsize=(8, 5))
    ax = fig.subplots()
    for (name, rows), colour in zip(
        by_strategy.items(), ("C0", "C1", "C2", "C3", "C4"), strict=False
    ):
        xs = [_x(r) for r in rows]
        for q, style in (("p50", "-"), ("p95", "--"), ("p99", ":")):
            ys = [r["latency_ms"][q] for r in rows]
            ax.plot(xs, ys, style, marker="o", color=colour, label=f"{name} {q}")
    _axes(ax, "latency (ms)", "Latency percentiles per strategy")
    fig.savefig(latency, dpi=100)
    fig = Figure(figsize=(8, 5))
    ax = fig.subplots()
    for name, rows in by_strategy.items():
        ax.plot([_x(r) for r in rows], [r["cost_per_1k_usd"] for r in rows], marker="o", label=name)
    _axes(ax, "cost per 1,000 requests (USD)", "Cost per 1k requests per strategy")
    fig.savefig(cost, dpi=100)
    return [latency, cost]


def _x(row: Mapping[str, Any]) -> str:
    return str(row["concurrency"]) if row["concurrency"] is not None else str(row["stage"])


def _axes(ax: Any, ylabel: str, title: str) -> None:
    ax.set_xlabel("concurrency (closed-loop clients)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")


def _secs(ms: float | None) -> str:
    if ms is None:
        return "n/a"
    return f"{ms / 1000:.2f} s" if ms >= 100 else f"{ms:.0f} ms"


def _pct(value: float | None, spec: str = ".1%") -> str:
    return "n/a" if value is None else format(value, spec)


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
