"""`bench run` keeps what it measured when a strategy breaks: the report (JSON + Markdown) has the
strategies that ran and lists the failed one with its one-line cause; the command exits 1."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hybrid_gateway.cli import main
from hybrid_gateway.tools.bench import runner
from hybrid_gateway.tools.bench.report import StageRun
from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.bench.stages import BenchError
from hybrid_gateway.tools.bench.strategies import STRATEGIES
from hybrid_gateway.tools.processes import ProcessStartError
from tests.tools.test_bench_run import EXAMPLE, tiny_workload

DEAD = "http://127.0.0.1:9"  # no emulator is started: the broken gateway stops at its config
HYBRID = STRATEGIES["hybrid"]


def measured(name: str) -> list[StageRun]:
    """What a strategy's stage would have collected (no processes: a canned result)."""
    result = RequestResult(
        item="q0-0", start_s=0.0, latency_ms=120.0, ttft_ms=None, status=200, error_code=None,
        stream=False, lane="heavy", channel="heavy-local", rule=None, cache="miss",
        cost_usd=0.002, mark_group="g0", mark_ok=True,
    )  # fmt: skip
    return [StageRun(name, "c4", 4, [result], {"duration_s": 1.0}, None)]


def broken_config(base: Any, upstreams: dict[str, str], log: Path) -> dict[str, Any]:
    """hybrid with what only the gateway refuses once loaded: audits and no request log."""
    config = HYBRID(base, upstreams, log)
    config["server"]["request_log"] = {"enabled": False}
    config["learning"] = {"audit": {"enabled": True}}
    return config


def run_bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, strategies: str) -> Path:
    """``bench run`` in this process: heavy-only and hybrid-cache measure (canned); hybrid
    starts a real gateway on its broken config, which exits before listening."""
    real = runner._run_processes

    def run_processes(
        args: argparse.Namespace, plan: runner.Plan, name: str, rate: float | None, folder: Path
    ) -> list[StageRun]:
        if name == "hybrid":
            return real(args, plan, name, rate, folder)
        if name == "hybrid-cache":
            raise BenchError("the load generator exited 1: boom\nsecond line")
        return measured(name)

    monkeypatch.setattr(runner, "_run_processes", run_processes)
    monkeypatch.setattr(runner, "_start_emulator", lambda *a: SimpleNamespace(url=DEAD))
    monkeypatch.setitem(STRATEGIES, "hybrid", broken_config)
    workload = tmp_path / "w.jsonl"
    tiny_workload(workload)
    out = tmp_path / "out"
    code = main([
        "bench", "run", "--workload", str(workload), "--strategies", strategies,
        "--concurrency", "4", "--duration", "1", "--warmup", "0", "--base-config", str(EXAMPLE),
        "--out", str(out), "--startup-timeout", "60", "--no-plots",
    ])  # fmt: skip
    assert code == 1
    return out


def test_a_failed_strategy_leaves_a_partial_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_bench(tmp_path, monkeypatch, "heavy-only,hybrid,hybrid-cache")
    [json_path] = out.glob("bench-*.json")
    report = json.loads(json_path.read_text())
    assert [r["strategy"] for r in report["results"]] == ["heavy-only"]
    assert list(report["strategies"]) == ["heavy-only"]
    failed = {f["strategy"]: f for f in report["failed"]}
    assert list(failed) == ["hybrid", "hybrid-cache"]
    gateway = failed["hybrid"]["cause"]
    assert "\n" not in gateway
    assert gateway.startswith("gateway-hybrid exited with code 2 before printing")
    assert gateway.endswith(
        "gateway.yaml: learning.audit.enabled: false, or "
        "server.request_log.enabled: true (verdicts are stored with the log)"
    )
    assert failed["hybrid"]["logs"].endswith("/hybrid/logs")
    assert failed["hybrid-cache"]["cause"] == "the load generator exited 1: boom"
    markdown = json_path.with_suffix(".md").read_text()
    assert f"- **hybrid**: FAILED, no results (logs: `{failed['hybrid']['logs']}`): {gateway}" in (
        markdown
    )
    assert "- **hybrid-cache**: FAILED, no results" in markdown
    assert "| heavy-only |" in markdown
    captured = capsys.readouterr()
    assert "| heavy-only |" in captured.out and f"wrote {json_path}" in captured.out
    last = captured.err.splitlines()[-1]
    assert last.startswith("bench run: 2 of 3 strategies failed, the report has the others: "
                           f"hybrid: {gateway}; hybrid-cache: the load generator")  # fmt: skip


def test_the_open_loop_rate_setter_failing_stops_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def crash(*args: Any) -> list[StageRun]:
        raise KeyError("light")  # a bug in a strategy: named, with its traceback on stderr

    monkeypatch.setattr(runner, "_run_strategy", crash)
    workload = tmp_path / "w.jsonl"
    tiny_workload(workload)
    out = tmp_path / "out"
    assert main([
        "bench", "run", "--workload", str(workload), "--strategies", "hybrid,heavy-only",
        "--mode", "both", "--concurrency", "4", "--duration", "1", "--warmup", "0",
        "--base-config", str(EXAMPLE), "--out", str(out), "--no-plots",
    ]) == 1  # fmt: skip
    [json_path] = out.glob("bench-*.json")
    report = json.loads(json_path.read_text())
    assert report["results"] == []
    assert [(f["strategy"], f["cause"]) for f in report["failed"]] == [
        ("heavy-only", "KeyError: 'light'"),
        ("hybrid", "not run: heavy-only failed, and it sets the open loop's rate (--rate)"),
    ]
    assert "Traceback" in capsys.readouterr().err


def test_the_cause_of_a_process_that_did_not_start() -> None:
    exc = ProcessStartError(
        "gateway-x exited with code 2 before printing 'listening on URL'\n"
        "  command: python -m hybrid_gateway.cli serve\n  stderr tail:\n    (no output)"
    )
    assert runner.one_line_cause(exc) == (
        "gateway-x exited with code 2 before printing 'listening on URL'"
    )
    assert runner.one_line_cause(OSError(28, "No space left on device")) == (
        "[Errno 28] No space left on device"
    )
    assert runner.one_line_cause(RuntimeError()) == "RuntimeError"
