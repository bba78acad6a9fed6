"""`bench run`'s Markdown: the strategy tables, every stage, lanes, the Project X verdict.

Drawn from the report object alone (``report.build_report``), so the Markdown never says what
the JSON does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["render_markdown", "strategy_tables"]

JsonDict = dict[str, Any]


def strategy_tables(report: JsonDict) -> list[str]:
    """The strategy table at each of ``table_stages`` (the highest concurrency, the open loop)."""
    rows: list[str] = []
    table = report["table_stage"]  # None: no stage ran (every strategy failed)
    for stage in report.get("table_stages") or ([table] if table is not None else []):
        if rows:
            rows.append("")
        rows += _strategy_table(report, stage)
    return rows


def _strategy_table(report: JsonDict, stage: str) -> list[str]:
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
        f"mode {st['mode']}, {st['duration_s']:g} s per stage after {st['warmup_s']:g} s warm-up"
        f"{_run_extras(report)}.",
        "",
        *[f"- **{name}**: {note}" for name, note in report["strategies"].items()],
        *_failed_lines(report),
        "",
        report["markdown_table"],
        "",
        "## Project X requirements, per strategy and stage",
        "",
        *verdict_tables(report),
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


def _failed_lines(report: JsonDict) -> list[str]:
    """A partial run: the strategies that gave no results, and why (``failed`` in the JSON)."""
    lines = []
    for failed in report.get("failed") or ():
        logs = f" (logs: `{failed['logs']}`)" if failed.get("logs") else ""
        lines.append(f"- **{failed['strategy']}**: FAILED, no results{logs}: {failed['cause']}")
    return lines


def _run_extras(report: JsonDict) -> str:
    """The emulator profile and the open loop's offered rate, when they are not the defaults."""
    extras = []
    if report["settings"].get("profile", "default") != "default":
        extras.append(f"emulator profile {report['settings']['profile']}")
    rates = {r["loadgen"].get("offered_rate_per_s") for r in report["results"]} - {None}
    if rates:
        extras.append("open loop at " + ", ".join(f"{x:.2f}" for x in sorted(rates)) + " req/s")
    return "".join(f"; {e}" for e in extras)


def _floor_lines(floor: JsonDict | None) -> list[str]:
    if not floor or floor.get("oracle_p95_s") is None:
        return []
    routed, ideal = floor.get("routed_p95_s"), floor.get("ideal_p95_s")
    return [
        f"p95 with every answer generated alone at the emulators' step times (no queue, no "
        f"batch; floor.py): {routed if routed is not None else '-'} s as this strategy routed "
        f"and cached, {floor['oracle_p95_s']} s with a perfect router and an exact cache, "
        f"{ideal if ideal is not None else '-'} s with a perfect router and a cache that also "
        "serves every paraphrase. The measured p95 above the first is queueing, batching and "
        "the gateway; a p95 goal below the second is out of any router's reach on these answers.",
        "",
    ]


def _held_back_lines(entries: Sequence[JsonDict] | None) -> list[str]:
    """What holds each missed line back (held_back.py): the ablations, the floor, the ceiling."""
    if not entries:
        return []
    return [
        "What holds each missed line back (the ablation rows of the same stage, the latency "
        "floor, the repeats of the stage). A difference between two rows is this run's: on a "
        "shared machine, repeat the run before acting on one:",
        "",
        *[f"- **{e['label'].strip()}**: {e['reading']}" for e in entries],
        "",
    ]


def verdict_tables(report: JsonDict) -> list[str]:
    """Issue 21's goal for ``full``, then one Project X table per stage: a column a strategy."""
    rows: list[str] = []
    goal = report.get("goal")
    if goal:
        rows += [
            f"Goal of issue 21 for `{goal['strategy']}` at stage {goal['stage']}: "
            f"{'met' if goal['met'] else 'NOT met'}",
            "",
            "| figure | measured | goal | |",
            "|---|---:|---:|---|",
            *[f"| {ln['label']} | {ln['shown']} | {ln['target']} | {_mark(ln['pass'])} |"
              for ln in goal["lines"]],
            "",
            *_floor_lines(goal.get("latency_floor")),
            *_held_back_lines(goal.get("held_back")),
        ]  # fmt: skip
    stages = list(dict.fromkeys(r["stage"] for r in report["results"]))
    for stage in stages:
        group = [r for r in report["results"] if r["stage"] == stage and r.get("project_x")]
        if not group:
            continue
        rows += [
            f"Stage {stage}:",
            "",
            "| requirement | target | " + " | ".join(r["strategy"] for r in group) + " |",
            "|---|---|" + "---:|" * len(group),
        ]
        for i, line in enumerate(group[0]["project_x"]):
            cells = [_cell(r["project_x"][i]) for r in group]
            rows.append(f"| {line['label']} | {line['target']} | " + " | ".join(cells) + " |")
        rows.append("")
    return rows


def _cell(line: Mapping[str, Any]) -> str:
    mark = _mark(line["pass"])
    return f"{line['shown']} {mark}".rstrip()


def _mark(passed: bool | None) -> str:
    return {True: "pass", False: "**FAIL**", None: ""}[passed]


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


def _secs(ms: float | None) -> str:
    if ms is None:
        return "n/a"
    return f"{ms / 1000:.2f} s" if ms >= 100 else f"{ms:.0f} ms"


def _pct(value: float | None, spec: str = ".1%") -> str:
    return "n/a" if value is None else format(value, spec)


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)
