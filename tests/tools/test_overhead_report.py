"""Report of `bench overhead`: ratios, PASS/MISS, JSON and Markdown files."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from hybrid_gateway.tools.overhead.procstat import ProcessUsage
from hybrid_gateway.tools.overhead.report import (
    SCHEMA,
    LevelResult,
    RunInfo,
    build_report,
    compare,
    machine_facts,
    render_markdown,
    write_report,
)
from hybrid_gateway.tools.overhead.wrk import WrkResult

STARTED = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


def level(target: str, conc: int, requests: int, cpu_s: float, errors: int = 0) -> LevelResult:
    load = WrkResult(
        requests=requests,
        duration_s=10.0,
        bytes_read=requests * 300,
        errors_connect=0,
        errors_read=0,
        errors_write=0,
        errors_status=errors,
        errors_timeout=0,
        p50_ms=1.0,
        p95_ms=2.0,
        p99_ms=3.0,
        mean_ms=1.2,
        max_ms=9.0,
    )
    usage = ProcessUsage(cpu_s=cpu_s, peak_rss_mib=80.0, rss_hwm_mib=81.0, samples=100)
    upstream = None if target == "emulator" else 1.0
    return LevelResult(target, conc, min(conc, 2), load, usage, upstream)


def info() -> RunInfo:
    return RunInfo(
        started_at=STARTED,
        finished_at=STARTED,
        argv=["hybrid-gateway", "bench", "overhead", "--duration=10"],
        machine=machine_facts("uvloop 0.21", "wrk 4.1.0"),
        settings={"duration_s": 10, "warmup_s": 2, "concurrency": [1, 20], "targets": ["x"]},
        notes=["a note"],
    )


def results() -> list[LevelResult]:
    return [
        level("emulator", 1, 20_000, 1.0),
        level("bare", 1, 10_000, 1.0),  # 1,000 RPS, 0.1 ms/req
        level("gateway", 1, 8_000, 2.0),  # 800 RPS (80 %), 0.25 ms/req: both PASS
        level("bare", 20, 60_000, 6.0),  # 6,000 RPS, 0.1 ms/req
        level("gateway", 20, 30_000, 12.0, errors=5),  # 50 %, 0.4 ms/req, errors: all MISS
    ]


def test_level_cpu_per_request() -> None:
    assert level("bare", 1, 10_000, 1.0).cpu_ms_per_request == 0.1
    assert level("bare", 1, 0, 1.0).cpu_ms_per_request is None


def test_compare_ratios_and_verdicts() -> None:
    rows = {row["concurrency"]: row for row in compare(results())}
    assert rows[1]["rps_ratio"] == 0.8
    assert rows[1]["cpu_ratio"] == 2.5
    assert [c["verdict"] for c in rows[1]["checks"]] == ["PASS", "PASS", "PASS"]
    assert rows[20]["rps_ratio"] == 0.5
    assert rows[20]["gateway_cpu_ms_per_request"] == 0.4
    assert [c["verdict"] for c in rows[20]["checks"]] == ["MISS", "MISS", "MISS"]


def test_compare_without_bare_proxy_gives_na_ratio() -> None:
    (row,) = compare([level("emulator", 1, 100, 0.1), level("gateway", 1, 100, 0.01)])
    assert row["rps_ratio"] is None
    assert [c["verdict"] for c in row["checks"]] == ["n/a", "PASS", "PASS"]


def test_compare_without_gateway_is_empty() -> None:
    assert compare([level("emulator", 1, 100, 0.1), level("bare", 1, 100, 0.1)]) == []


def test_build_report_has_the_expected_keys() -> None:
    report = build_report(info(), results())
    assert report["schema"] == SCHEMA
    assert report["command"] == "hybrid-gateway bench overhead --duration=10"
    assert report["verdict"] == "MISS"
    assert set(report["machine"]) >= {"cpu_count", "python", "loop", "wrk", "platform"}
    first = report["results"][0]
    assert set(first) >= {
        "target", "concurrency", "rps", "p50_ms", "p95_ms", "p99_ms", "errors",
        "cpu_ms_per_request", "peak_rss_mib",
    }  # fmt: skip
    assert first["upstream_cpu_ms_per_request"] is None
    assert report["results"][1]["upstream_cpu_ms_per_request"] == 0.1
    json.dumps(report)  # serialisable as is


def test_markdown_shows_both_tables_and_verdicts() -> None:
    md = render_markdown(build_report(info(), results()))
    assert "| target | conc | RPS |" in md
    assert "| gateway | 20 | 3,000 |" in md
    assert "| 1 | 80% | >= 0.70 | PASS | 0.250 | <= 0.3 ms | PASS | 2.50x | 0 PASS |" in md
    assert "| 20 | 50% | >= 0.70 | MISS | 0.400 | <= 0.3 ms | MISS | 4.00x | 5 MISS |" in md
    assert "Overall: **MISS**" in md
    assert "- a note" in md


def test_markdown_without_gateway_has_no_comparison() -> None:
    md = render_markdown(build_report(info(), [level("bare", 1, 100, 0.1)]))
    assert "gateway/bare" not in md
    assert "Overall" not in md


def test_write_report_names_files_by_start_time(tmp_path: Path) -> None:
    report = build_report(info(), results())
    json_path, md_path = write_report(report, tmp_path / "bench", STARTED)
    assert json_path.name == "overhead-20250304-050607.json"
    assert md_path.name == "overhead-20250304-050607.md"
    assert json.loads(json_path.read_text()) == report
    assert md_path.read_text() == render_markdown(report)
