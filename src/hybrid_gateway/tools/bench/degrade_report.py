"""The Markdown side of `bench degrade`'s report: one table per scenario, targets and verdicts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["render_markdown"]


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.2f} %"


def _stage_row(label: str, fig: Mapping[str, Any]) -> str:
    lat, ttft = fig["latency_ms"], fig["ttft_ms"]
    return (
        f"| {label} | {fig['requests']} | {_pct(fig['success_rate'])} | "
        f"{fig['refused_429_503']} | {fig['other_errors']} | {_fmt(fig['admitted_per_s'])} | "
        f"{_fmt(lat['p50'], 0)} | {_fmt(lat['p95'], 0)} | {_fmt(lat['p99'], 0)} | "
        f"{_fmt(ttft['p95'], 0)} |"
    )


_HEADER = (
    "| stage | requests | success | refused 429/503 | other errors | admitted/s | "
    "p50 ms | p95 ms | p99 ms | TTFT p95 ms |\n|---|---|---|---|---|---|---|---|---|---|"
)


def render_markdown(report: Mapping[str, Any]) -> str:
    lines = [f"# bench degrade ({report['started_at']})", ""]
    scenarios = report["scenarios"]
    for name in ("errors", "errors-no-breaker"):
        if name not in scenarios:
            continue
        s = scenarios[name]
        lines += [
            f"## Heavy channel at 20 % errors, with a backup ({name})", "", s["what"], "", _HEADER,
            _stage_row("heavy", s["stage"]), "",
            f"Errors by code: {s['stage']['errors_by_code'] or 'none'}; answers by fallback: "
            f"{s['stage']['fallbacks'] or 'none'}.  Target success >= 99.5 %: "
            f"**{_fmt(s['pass'])}**.", "",
        ]  # fmt: skip
    if "isolation" in scenarios:
        s = scenarios["isolation"]
        lines += [
            "## Lane isolation", "", s["what"], "", _HEADER,
            _stage_row("heavy capacity (closed, c=slots)", s["heavy_capacity"]),
            _stage_row("light, heavy idle", s["light_heavy_idle"]),
            _stage_row("light, heavy at 2x", s["light_heavy_saturated"]),
            _stage_row("heavy at 2x", s["heavy_saturated"]), "",
            f"Light p95 ratio (saturated / idle): **{_fmt(s['light_p95_ratio'], 3)}** "
            f"(target <= 1.2: **{_fmt(s['pass'])}**).", "",
        ]  # fmt: skip
    if "overload" in scenarios:
        s = scenarios["overload"]
        lines += ["## Overload at 2x total capacity", "", s["what"], "", _HEADER]
        for lane, fig in s["lanes"].items():
            lines += [
                _stage_row(f"{lane} capacity", fig["capacity"]),
                _stage_row(f"{lane} at 2x", fig["overload_2x"]),
                _stage_row(f"{lane} recovery at 0.5x", fig["recovery_half"]),
            ]
        lines.append("")
        for lane, fig in s["lanes"].items():
            lines.append(
                f"- {lane}: admitted p95 / p95 at capacity = "
                f"{_fmt(fig['admitted_p95_vs_capacity_p95'], 2)}; SLA bound (p95 at capacity + "
                f"queue timeout) {fig['sla_p95_bound_ms']} ms: kept **{_fmt(fig['keeps_sla'])}**"
            )
        probe, over = s["refusals_probed"], s["gateway_overload"]
        lines += [
            f"- refusals probed: {probe['refused']} of {probe['probes']} probes, "
            f"{probe['refused_without_retry_after']} without Retry-After",
            f"- gateway max RSS during overload: {_fmt(over.get('peak_rss_mib'))} MiB "
            f"(recovery: {_fmt(s['gateway_recovery'].get('peak_rss_mib'))} MiB)",
            f"- recovered by itself: **{_fmt(s['recovered'])}**; all targets: "
            f"**{_fmt(s['pass'])}**", "",
        ]  # fmt: skip
    return "\n".join(lines)
