"""Results of `bench overhead --pipeline full`: levels, ratios to the pass-through and the
floor, the open-loop p99 added, the stage breakdown, and the issue 25 goals, as JSON (the
record) and Markdown rendered from it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybrid_gateway.tools.overhead.openloop import OpenLoopResult
from hybrid_gateway.tools.overhead.report import LevelResult, write_pair
from hybrid_gateway.tools.overhead.stages import STAGES, StageProfile

__all__ = ["GOALS", "SCHEMA", "FullRun", "build_full_report", "render_full_markdown",
           "write_full_report"]  # fmt: skip

SCHEMA = "hybrid-gateway/bench-overhead-full/1"
JsonDict = dict[str, Any]
# Issue 25: (prompt, what, bound, at_least)
GOALS = (
    ("short", "rps_ratio_to_pass_through", 0.25, True),
    ("long", "rps_ratio_to_pass_through", 0.15, True),
    ("short", "full_cpu_ms_per_request", 2.0, False),
    ("long", "full_cpu_ms_per_request", 6.0, False),
    ("short", "open_loop_p99_added_ms", 15.0, False),
    ("long", "open_loop_p99_added_ms", 15.0, False),
)
_GOAL_CONCURRENCY = 50


@dataclass
class FullRun:
    argv: Sequence[str]
    settings: JsonDict
    levels: list[LevelResult] = field(default_factory=list)
    open_loop: list[tuple[str, str, OpenLoopResult]] = field(default_factory=list)
    stages: list[StageProfile] = field(default_factory=list)
    outcomes: list[JsonDict] = field(default_factory=list)  # the full pipeline's request log
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    finished_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    machine: JsonDict = field(default_factory=dict)


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or den is None or den <= 0 else round(num / den, 4)


def _comparison(levels: Sequence[LevelResult]) -> list[JsonDict]:
    by = {(r.target, r.prompt, r.concurrency): r for r in levels}
    rows = []
    for prompt, conc in dict.fromkeys((r.prompt, r.concurrency) for r in levels):
        full, gw, bare = (by.get((t, prompt, conc)) for t in ("full", "gateway", "bare"))
        if full is None:
            continue
        rows.append({
            "prompt": prompt, "concurrency": conc,
            "full_rps": round(full.load.rps, 1),
            "rps_ratio_to_pass_through": _ratio(full.load.rps, gw.load.rps if gw else None),
            "rps_ratio_to_floor": _ratio(full.load.rps, bare.load.rps if bare else None),
            "full_cpu_ms_per_request": _ratio(full.cpu_ms_per_request, 1.0),
            "pass_through_cpu_ms_per_request": _ratio(gw.cpu_ms_per_request, 1.0) if gw else None,
            "floor_cpu_ms_per_request": _ratio(bare.cpu_ms_per_request, 1.0) if bare else None,
            "full_errors": full.load.errors,
        })  # fmt: skip
    return rows


def _open_loop(runs: Sequence[tuple[str, str, OpenLoopResult]]) -> list[JsonDict]:
    by = {(target, prompt): r for target, prompt, r in runs}
    rows = []
    for prompt in dict.fromkeys(p for _, p, _ in runs):
        full, gw = by.get(("full", prompt)), by.get(("gateway", prompt))
        either = full or gw
        rows.append({
            "prompt": prompt,
            "rate": either.rate if either is not None else None,
            "pass_through": gw.to_json() if gw else None,
            "full": full.to_json() if full else None,
            "open_loop_p99_added_ms": round(full.p99_ms - gw.p99_ms, 3) if full and gw else None,
        })  # fmt: skip
    return rows


def _stages(run: FullRun) -> list[JsonDict]:
    out = []
    for stage in run.stages:
        rows = [r for r in run.levels if r.target == "full" and r.prompt == stage.prompt]
        top = max(rows, key=lambda r: r.concurrency) if rows else None
        cpu = top.cpu_ms_per_request if top else None
        # the embed stage at its batched cost: it is one e5 call per request without the
        # cascades and a share of one with them, so it is scaled, not replaced
        embed = stage.cpu_ms["embed"]
        scale = stage.embed_batch_ms / stage.embed_alone_ms if stage.embed_alone_ms > 0 else 1.0
        batched = stage.total_ms - embed + embed * scale
        # negative: the stages one at a time cost more than under load (the static embedder's
        # unseen tokens are computed one request at a time here, in shared batches under load)
        rest = None if cpu is None or cpu < batched else round(cpu - batched, 3)
        out.append({**stage.to_json(), "under_load_cpu_ms_per_request": _ratio(cpu, 1.0),
                    "under_load_concurrency": top.concurrency if top else None,
                    "rest_ms": rest})  # fmt: skip
    return out


def _goals(comparison: Sequence[JsonDict], open_loop: Sequence[JsonDict]) -> list[JsonDict]:
    out = []
    for prompt, what, bound, at_least in GOALS:
        source = open_loop if what.startswith("open_loop") else [
            c for c in comparison if c["concurrency"] == _GOAL_CONCURRENCY]  # fmt: skip
        values = [row[what] for row in source if row["prompt"] == prompt and row[what] is not None]
        value = values[0] if values else None
        verdict = "n/a" if value is None else (
            "MET" if (value >= bound if at_least else value <= bound) else "NOT MET")  # fmt: skip
        out.append({"prompt": prompt, "goal": what, "bound": f"{'>=' if at_least else '<='} "
                    f"{bound:g}", "value": value, "verdict": verdict})  # fmt: skip
    return out


def build_full_report(run: FullRun) -> JsonDict:
    comparison = _comparison(run.levels)
    open_loop = _open_loop(run.open_loop)
    return {
        "schema": SCHEMA,
        "started_at": run.started_at.isoformat(timespec="seconds"),
        "finished_at": run.finished_at.isoformat(timespec="seconds"),
        "command": " ".join(run.argv),
        "machine": run.machine,
        "settings": run.settings,
        "results": [{**r.to_json(), "prompt": r.prompt} for r in run.levels],
        "comparison": comparison,
        "open_loop": open_loop,
        "stages": _stages(run),
        "outcomes": run.outcomes,
        "goals": _goals(comparison, open_loop),
    }


def _f(value: float | None, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def render_full_markdown(report: JsonDict) -> str:
    m = report["machine"]
    lines = [
        f"# bench overhead --pipeline full, {report['started_at']}", "",
        f"`{report['command']}`", "",
        f"Machine: {m.get('cpu_count')} CPUs, {m.get('python')}, loop {m.get('loop')}, "
        f"{m.get('wrk')}, load average at start {m.get('loadavg_at_start')}.  Every request "
        "carries a unique question (no exact or semantic hit); `bare` = the aiohttp relay "
        "(floor), `gateway` = pass-through (rules, exact cache, request log), `full` = the "
        "same plus the semantic cache (SQLite store) and the classifier on the bundled "
        "embedder, each with its static cascade unless `--full-set` says otherwise.", "",
        "| target | prompt | conc | RPS | p50 ms | p99 ms | errors | CPU ms/req | peak RSS MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for r in report["results"]:
        cpu = _f(r["cpu_ms_per_request"], ".3f")
        lines.append(f"| {r['target']} | {r['prompt']} | {r['concurrency']} | {r['rps']:,.0f} | "
                     f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['errors']} | {cpu} | "
                     f"{r['peak_rss_mib']:.0f} |")  # fmt: skip
    lines += ["", "| prompt | conc | full / pass-through RPS | full / floor RPS | CPU ms/req: "
              "full | pass-through | floor |", "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for c in report["comparison"]:
        lines.append(f"| {c['prompt']} | {c['concurrency']} | "
                     f"{_f(c['rps_ratio_to_pass_through'], '.3f')} | "
                     f"{_f(c['rps_ratio_to_floor'], '.3f')} | "
                     f"{_f(c['full_cpu_ms_per_request'])} | "
                     f"{_f(c['pass_through_cpu_ms_per_request'], '.3f')} | "
                     f"{_f(c['floor_cpu_ms_per_request'], '.3f')} |")  # fmt: skip
    if report["open_loop"]:
        lines += ["", "Open loop (latency from each request's due time, after a warm-up as long as "
                  "the levels', not counted):", "",
                  "| prompt | rate/s | pass-through p50 / p99 ms | full p50 / p99 ms | "
                  "p99 added ms | errors (full) |", "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
        for o in report["open_loop"]:
            gw, full = o["pass_through"] or {}, o["full"] or {}
            added = _f(o["open_loop_p99_added_ms"], ".1f")
            lines.append(f"| {o['prompt']} | {_f(o['rate'], 'g')} | {_f(gw.get('p50_ms'), '.1f')}"
                         f" / {_f(gw.get('p99_ms'), '.1f')} | {_f(full.get('p50_ms'), '.1f')} / "
                         f"{_f(full.get('p99_ms'), '.1f')} | {added} | "
                         f"{full.get('errors', 'n/a')} |")  # fmt: skip
    lines += _stage_lines(report["stages"])
    if report["outcomes"]:
        lines += ["", "The full pipeline's requests (warm-up, levels and open loop), from its "
                  "request log:", "", "| prompt | cache | checks | route rule | requests |",
                  "|---|---|---|---|---:|"]  # fmt: skip
        lines += [f"| {o['prompt']} | {o['cache']} | {o['checks'] or '-'} | {o['rule']} | "
                  f"{o['requests']} |" for o in report["outcomes"]]  # fmt: skip
    lines += ["", "| goal (issue 25, c=50) | prompt | bound | value | verdict |",
              "|---|---|---|---:|---|"]  # fmt: skip
    for g in report["goals"]:
        lines.append(f"| {g['goal']} | {g['prompt']} | {g['bound']} | {_f(g['value'], '.3f')} | "
                     f"{g['verdict']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _stage_lines(stages: Sequence[JsonDict]) -> list[str]:
    if not stages:
        return []
    lines = ["", "CPU per request by stage, ms (in-process, one request at a time; `embed "
             "batched` = CPU per text of one call over 16 texts; `rest` = the full pipeline's "
             "CPU per request under load (highest concurrency) minus the stages with embed at "
             "its batched cost: HTTP, JSON, exact cache, request log, event loop; approximate, "
             "since batches under load vary; `n/a` when the stages one at a time cost more than "
             "the whole request under load, as when the static embedder meets unseen tokens, "
             "which it computes in shared batches under load):", "",
             "| prompt | " + " | ".join(STAGES) + " | embed batched | rest | under load | "
             "entries |", "|---|" + "---:|" * (len(STAGES) + 4)]  # fmt: skip
    for s in stages:
        cells = " | ".join(_f(s["cpu_ms_per_request"][k], ".3f") for k in STAGES)
        lines.append(f"| {s['prompt']} | {cells} | {_f(s['embed_batch_ms_per_text'], '.3f')} | "
                     f"{_f(s['rest_ms'])} | {_f(s['under_load_cpu_ms_per_request'])} | "
                     f"{s['entries']} |")  # fmt: skip
    return lines


def write_full_report(report: JsonDict, out_dir: Path, stamp: datetime) -> tuple[Path, Path]:
    """Write ``overhead-full-YYYYmmdd-HHMMSS.{json,md}`` into ``out_dir``."""
    return write_pair(report, out_dir / f"overhead-full-{stamp:%Y%m%d-%H%M%S}",
                      render_full_markdown)  # fmt: skip
