"""bench replicas: its figures from known results, its decision benchmark, a small real run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hybrid_gateway.tools.bench.replicas_decision import decision_costs
from hybrid_gateway.tools.bench.replicas_load import Sample, TurnResult
from hybrid_gateway.tools.bench.replicas_report import as_dict, goals, markdown, policy_figures
from hybrid_gateway.tools.workload.conversations import (
    ConversationPlan,
    build_conversations,
    load_texts,
)

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def result(turn: int, ttft: float, latency: float, endpoint: str, status: int = 200) -> TurnResult:
    return TurnResult("c", turn, sent_s=turn * 1.0, status=status, ttft_ms=ttft,
                      latency_ms=latency, endpoint=endpoint)  # fmt: skip


def test_figures_count_failures_hits_and_imbalance_over_busy_samples_only() -> None:
    results = [result(0, 100, 400, "r0"), result(1, 20, 300, "r0"), result(2, 30, 300, "r1"),
               result(3, 0, 5, "r1", status=503)]  # fmt: skip
    samples = [
        Sample(0.0, {"r0": 1, "r1": 0}, {}),  # 1 in flight on 2 replicas: not counted
        Sample(0.1, {"r0": 3, "r1": 1}, {}),
        Sample(0.2, {"r0": 2, "r1": None}, {}),
    ]
    stats = {"a": {"prefix_hit_tokens": 300, "prefix_lookup_tokens": 1000},
             "b": {"prefix_hit_tokens": 100, "prefix_lookup_tokens": 1000}}  # fmt: skip
    f = policy_figures("prefix_affinity", results, samples, stats)
    assert (f.requests, f.failed, f.ttft_p50_ms, f.prefix_hit_rate) == (4, 1, 30.0, 0.2)
    assert f.imbalance_mean == pytest.approx((1.5 + 1.0) / 2, abs=0.01)
    assert f.imbalance_avg_load == 1.5  # 3 and 1: the busy sample where every replica answered
    assert f.requests_by_endpoint == {"r0": 2, "r1": 1}
    rr = policy_figures("round_robin", [result(0, 100, 400, "r0")] * 3, samples, stats)
    verdicts = {g["goal"]: g["met"] for g in goals([rr, f], None, [])}
    assert verdicts["prefix_affinity TTFT p50 <= 0.4x round_robin"] is True
    report = {"command": "x", "settings": {}, "policies": [as_dict(f)], "goals": []}
    assert "| prefix_affinity | 4 | 1 | 30.0 |" in markdown(report)


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data is not here")
def test_the_decision_benchmark_times_every_policy_at_64_endpoints() -> None:
    plan = ConversationPlan(conversations=20, turns=3, system_tokens=128, context_tokens=64)
    costs = decision_costs(build_conversations(load_texts(DATA), plan), ["round_robin",
                           "prefix_affinity"], decisions=50)  # fmt: skip
    assert [(c.policy, c.endpoints, c.decisions) for c in costs] == [
        ("round_robin", 64, 50), ("prefix_affinity", 64, 50)]  # fmt: skip
    assert all(0 < c.cpu_p50_us <= c.cpu_p99_us for c in costs)
    assert all(c.replays == 5 and 0 < c.best_p50_us <= c.best_p99_us for c in costs)


def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "hybrid_gateway.cli", "bench", "replicas", "--policies", "magic",
         "--out", str(tmp_path)], capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "magic" in run.stderr


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data is not here")
def test_a_small_run_reports_every_policy_and_the_kill_phase(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "hybrid_gateway.cli", "bench", "replicas", "--endpoints", "2",
         "--policies", "round_robin,prefix_affinity", "--conversations", "4", "--turns", "2",
         "--rate", "8", "--system-tokens", "128", "--context-tokens", "128", "--max-tokens", "8",
         "--restart-after-s", "1", "--data-dir", str(DATA), "--out", str(tmp_path)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "replicas.json").read_text())
    assert [p["policy"] for p in report["policies"]] == ["round_robin", "prefix_affinity"]
    assert all(p["requests"] == 8 for p in report["policies"])
    assert report["kill"]["endpoint"] == "r1" and report["kill"]["requests"] == 8
    assert {c["policy"] for c in report["decision"]} == {
        "round_robin", "least_outstanding", "prefix_affinity", "session"}  # fmt: skip
    assert (tmp_path / "replicas.md").read_text().startswith("# bench replicas")
