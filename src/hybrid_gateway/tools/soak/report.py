"""The soak's report: ``soak-….json`` (all samples, the fits, the checks), ``.md`` and ``.png``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

__all__ = ["SCHEMA", "markdown", "write_report"]

SCHEMA = "hybrid-gateway/soak/1"


def markdown(report: dict[str, Any]) -> str:
    settings, requests = report["settings"], report["requests"]
    verdict = "PASS" if report["passed"] else "FAIL"
    lines = [
        f"# Soak {report['started_at']}: {verdict}",
        "",
        f"{settings['duration_s']:g} s of traffic at concurrency {settings['concurrency']} "
        f"({settings['warmup_s']:g} s warm-up not fitted, a sample every "
        f"{settings['interval_s']:g} s); {requests['total']} requests "
        f"({requests['per_s']:.1f}/s).",
        "",
        "| series | median | slope / min | growth after warm-up | limit | noise | verdict |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for trend in report["trends"].values():
        lines.append(
            f"| {trend['name']} ({trend['unit']}) | {trend['median']:g} | "
            f"{trend['slope_per_min']:+.3f} | {trend['growth']:+.2f} | {trend['limit']:.2f} | "
            f"{trend['noise']:.2f} | {'GROWS' if trend['grows'] else 'flat'} |"
        )
    settled = report["settled"]
    lines += [
        "",
        "After the traffic stopped and the gateway settled:",
        "",
        f"- upstream requests still running or queued at the emulators: "
        f"{settled['upstream_in_flight']}",
        f"- upstream connections not idle in a pool (leaked): {settled['leaked_connections']} "
        f"({settled['upstream_connections']} established, {settled['upstream_idle']} pooled, "
        f"{settled['upstream_close_wait']} in CLOSE_WAIT)",
        f"- asyncio tasks: {settled['tasks']} (before the traffic: {settled['tasks_before']})",
        "",
        "| kind | outcomes |",
        "|---|---|",
    ]
    for kind, outcomes in requests["by_kind"].items():
        counts = ", ".join(f"{name} {n}" for name, n in outcomes.items())
        lines.append(f"| {kind} | {counts} |")
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], folder: Path, stem: str, plots: bool) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    json_path, md_path = folder / f"{stem}.json", folder / f"{stem}.md"
    json_path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    md_path.write_text(markdown(report))
    paths = [json_path, md_path]
    if plots:
        paths.append(_plot(report, folder / f"{stem}.png"))
    return paths


def _plot(report: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples: Sequence[dict[str, Any]] = report["samples"]
    warmup = report["settings"]["warmup_s"]
    trends = report["trends"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    for ax, (name, trend) in zip(axes.flat, trends.items(), strict=False):
        ts = [s["t_s"] for s in samples]
        ax.plot(ts, [s[name] for s in samples], lw=1, label=name)
        fitted_ts = [t for t in ts if t >= warmup]
        if fitted_ts:
            ends = [fitted_ts[0], fitted_ts[-1]]
            fit = [trend["intercept"] + trend["slope_per_min"] / 60 * t for t in ends]
            ax.plot(ends, fit, "--", lw=1.5, label=f"fit {trend['slope_per_min']:+.3f}/min")
        ax.axvspan(0, warmup, color="0.9", label="warm-up")
        verdict = "GROWS" if trend["grows"] else "flat"
        ax.set_title(f"{name} ({trend['unit']}): {verdict}", fontsize=10)
        ax.legend(fontsize=8, loc="lower right")
    for ax in axes[-1]:
        ax.set_xlabel("seconds")
    fig.suptitle(f"hybrid-gateway soak {report['started_at']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
