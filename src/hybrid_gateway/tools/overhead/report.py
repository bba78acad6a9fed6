"""Results of `bench overhead`: per-level figures, gateway/bare-proxy ratios, JSON and Markdown.

The JSON is the record (one object, stable keys, ``schema`` versioned); the Markdown is
rendered from that same object so the two never disagree.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from hybrid_gateway.tools.overhead.procstat import ProcessUsage
from hybrid_gateway.tools.overhead.wrk import WrkResult

__all__ = [
    "SCHEMA",
    "TARGET_GATEWAY_CPU_MS",
    "TARGET_RPS_RATIO",
    "LevelResult",
    "RunInfo",
    "build_report",
    "compare",
    "machine_facts",
    "render_markdown",
    "write_report",
]

SCHEMA = "hybrid-gateway/bench-overhead/1"
# Issue 2 targets for the pass-through path (exact-cache miss + rule routing + relay + log).
TARGET_RPS_RATIO = 0.70
TARGET_GATEWAY_CPU_MS = 0.3

JsonDict = dict[str, Any]


@dataclass(frozen=True)
class LevelResult:
    """One target at one concurrency: what wrk saw and what the target process used."""

    target: str
    concurrency: int
    threads: int
    load: WrkResult
    usage: ProcessUsage
    # CPU the emulator spent behind a proxy/gateway during the level (context only).
    upstream_cpu_s: float | None = None
    prompt: str = "classic"  # prompts.PROMPT_KINDS

    @property
    def cpu_ms_per_request(self) -> float | None:
        return _per_request_ms(self.usage.cpu_s, self.load.requests)

    def to_json(self) -> JsonDict:
        load = self.load
        return {
            "target": self.target,
            "concurrency": self.concurrency,
            "threads": self.threads,
            "requests": load.requests,
            "duration_s": round(load.duration_s, 3),
            "rps": round(load.rps, 1),
            "p50_ms": round(load.p50_ms, 3),
            "p95_ms": round(load.p95_ms, 3),
            "p99_ms": round(load.p99_ms, 3),
            "mean_ms": round(load.mean_ms, 3),
            "max_ms": round(load.max_ms, 3),
            "errors": load.errors,
            "errors_detail": {
                "status_4xx_5xx": load.errors_status,
                "connect": load.errors_connect,
                "read": load.errors_read,
                "write": load.errors_write,
                "timeout": load.errors_timeout,
            },
            "cpu_s": round(self.usage.cpu_s, 3),
            "cpu_ms_per_request": _round(self.cpu_ms_per_request, 4),
            "peak_rss_mib": round(self.usage.peak_rss_mib, 1),
            "rss_hwm_mib": _round(self.usage.rss_hwm_mib, 1),
            "upstream_cpu_ms_per_request": _round(
                None
                if self.upstream_cpu_s is None
                else _per_request_ms(self.upstream_cpu_s, load.requests),
                4,
            ),
        }


@dataclass(frozen=True)
class RunInfo:
    """Everything about the run that is not a measurement."""

    started_at: datetime
    finished_at: datetime
    argv: Sequence[str]
    machine: JsonDict
    settings: JsonDict
    notes: Sequence[str] = field(default_factory=tuple)


def machine_facts(loop: str, wrk: str) -> JsonDict:
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    load = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "loop": loop,
        "wrk": wrk,
        "loadavg_at_start": load,
    }


def compare(results: Sequence[LevelResult]) -> list[JsonDict]:
    """Gateway vs bare proxy at each concurrency where both ran, with PASS/MISS per target."""
    by_key = {(r.target, r.concurrency): r for r in results}
    rows: list[JsonDict] = []
    for conc in sorted({r.concurrency for r in results}):
        gateway, bare = by_key.get(("gateway", conc)), by_key.get(("bare", conc))
        if gateway is None:
            continue
        rps_ratio = _ratio(gateway.load.rps, bare.load.rps) if bare else None
        cpu_ratio = _ratio(gateway.cpu_ms_per_request, bare.cpu_ms_per_request) if bare else None
        gw_cpu = gateway.cpu_ms_per_request
        rows.append(
            {
                "concurrency": conc,
                "gateway_rps": round(gateway.load.rps, 1),
                "bare_rps": round(bare.load.rps, 1) if bare else None,
                "rps_ratio": _round(rps_ratio, 3),
                "gateway_cpu_ms_per_request": _round(gw_cpu, 4),
                "bare_cpu_ms_per_request": _round(bare.cpu_ms_per_request, 4) if bare else None,
                "cpu_ratio": _round(cpu_ratio, 3),
                "checks": [
                    _check(
                        "rps_ratio", rps_ratio, f">= {TARGET_RPS_RATIO:.2f}", TARGET_RPS_RATIO, True
                    ),
                    _check(
                        "gateway_cpu_ms_per_request",
                        gw_cpu,
                        f"<= {TARGET_GATEWAY_CPU_MS:g} ms",
                        TARGET_GATEWAY_CPU_MS,
                        False,
                    ),
                    # A gateway that fails fast would otherwise look cheap and quick.
                    _check("gateway_errors", float(gateway.load.errors), "== 0", 0.0, False),
                ],
            }
        )
    return rows


def _check(name: str, value: float | None, text: str, bound: float, at_least: bool) -> JsonDict:
    if value is None:
        verdict = "n/a"
    else:
        verdict = "PASS" if (value >= bound if at_least else value <= bound) else "MISS"
    return {"name": name, "value": _round(value, 4), "target": text, "verdict": verdict}


def build_report(info: RunInfo, results: Sequence[LevelResult]) -> JsonDict:
    comparison = compare(results)
    verdicts = [c["verdict"] for row in comparison for c in row["checks"] if c["verdict"] != "n/a"]
    overall = "n/a" if not verdicts else ("PASS" if all(v == "PASS" for v in verdicts) else "MISS")
    return {
        "schema": SCHEMA,
        "started_at": info.started_at.isoformat(timespec="seconds"),
        "finished_at": info.finished_at.isoformat(timespec="seconds"),
        "command": " ".join(info.argv),
        "argv": list(info.argv),
        "machine": info.machine,
        "settings": info.settings,
        "targets": {
            "rps_ratio_min": TARGET_RPS_RATIO,
            "gateway_cpu_ms_per_request_max": TARGET_GATEWAY_CPU_MS,
        },
        "results": [r.to_json() for r in results],
        "comparison": comparison,
        "verdict": overall,
        "notes": list(info.notes),
    }


def render_markdown(report: JsonDict) -> str:
    machine, settings = report["machine"], report["settings"]
    lines = [
        f"# bench overhead, {report['started_at']}",
        "",
        f"`{report['command']}`",
        "",
        f"Machine: {machine['cpu_count']} CPUs, {machine['python']}, loop {machine['loop']}, "
        f"{machine['wrk']}, load average at start {machine['loadavg_at_start']}.  "
        f"{settings['duration_s']} s per level after {settings['warmup_s']} s warm-up; "
        "every request body unique (exact-cache miss).",
        "",
        *_results_table(report["results"]),
        "",
    ]
    if report["comparison"]:
        lines += [
            *_comparison_table(report["comparison"]),
            "",
            f"Overall: **{report['verdict']}**",
            "",
        ]
    lines += [f"- {note}" for note in report["notes"]]
    return "\n".join(lines).rstrip() + "\n"


def _results_table(results: Sequence[JsonDict]) -> list[str]:
    rows = [
        "| target | conc | RPS | p50 ms | p95 ms | p99 ms | errors | CPU ms/req | peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        rows.append(
            f"| {r['target']} | {r['concurrency']} | {r['rps']:,.0f} | {r['p50_ms']:.2f} | "
            f"{r['p95_ms']:.2f} | {r['p99_ms']:.2f} | {r['errors']} | "
            f"{_fmt(r['cpu_ms_per_request'], '.3f')} | {r['peak_rss_mib']:.1f} |"
        )
    return rows


def _comparison_table(comparison: Sequence[JsonDict]) -> list[str]:
    rows = [
        "| conc | gateway/bare RPS | target | verdict | gateway CPU ms/req | target | verdict "
        "| gateway/bare CPU per req | gateway errors |",
        "|---:|---:|---|---|---:|---|---|---:|---|",
    ]
    for c in comparison:
        rps_check, cpu_check, err_check = c["checks"]
        cpu_ratio = _fmt(c["cpu_ratio"], ".2f", "x")
        rows.append(
            f"| {c['concurrency']} | {_fmt(c['rps_ratio'], '.0%')} | {rps_check['target']} | "
            f"{rps_check['verdict']} | {_fmt(c['gateway_cpu_ms_per_request'], '.3f')} | "
            f"{cpu_check['target']} | {cpu_check['verdict']} | {cpu_ratio} | "
            f"{err_check['value']:.0f} {err_check['verdict']} |"
        )
    return rows


def write_report(report: JsonDict, out_dir: Path, stamp: datetime) -> tuple[Path, Path]:
    """Write ``overhead-YYYYmmdd-HHMMSS.{json,md}`` into ``out_dir``; returns both paths."""
    return write_pair(report, out_dir / f"overhead-{stamp:%Y%m%d-%H%M%S}", render_markdown)


def write_pair(
    report: JsonDict, stem: Path, render: Callable[[JsonDict], str]
) -> tuple[Path, Path]:
    """``stem``.json (the record) and ``stem``.md (rendered from it)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path = stem.with_suffix(".json"), stem.with_suffix(".md")
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    md_path.write_text(render(report))
    return json_path, md_path


def _per_request_ms(cpu_s: float, requests: int) -> float | None:
    return cpu_s * 1000.0 / requests if requests > 0 else None


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "n/a" if value is None else format(value, spec) + unit
