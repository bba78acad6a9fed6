"""`hybrid-gateway bench run` end to end: real emulators, gateway and load generator, short."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.bench.stages import first_sends
from hybrid_gateway.tools.processes import child_env, python_module_argv
from hybrid_gateway.tools.workload.schema import Labels, WorkloadItem, write_workload

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gateway.yaml"
QUESTIONS = (
    ("how do I install the CLI on Linux?", "simple"),
    ("how to install the SDK behind a proxy?", "simple"),
    ("what is the default timeout?", "simple"),
    ("where do I set the API key?", "simple"),
    ("Reset my PIN please", "simple"),
    ("Card not arrived yet", "simple"),
    ("Prove that there are infinitely many primes, step by step, and then discuss " * 6, "complex"),
    ("```python\nprint(1)\n```\nWhy does this code print 1 and not 2? Explain.", "complex"),
    ("Compare the thermodynamic efficiency of two heat engines in detail. " * 7, "complex"),
    ("What is the capital of France?", "simple"),
)  # fmt: skip


def tiny_workload(path: Path) -> None:
    """10 questions, each asked 3 times verbatim: 30 items, later copies can hit the cache."""
    items = []
    for copy in range(3):
        for k, (text, complexity) in enumerate(QUESTIONS):
            labels = Labels(
                light_ok=complexity == "simple", heavy_ok=True, complexity=complexity,
                category="test", source="test", group=f"g{k}", lang="en", outcome="assumed",
            )  # fmt: skip
            items.append(
                WorkloadItem(
                    id=f"q{k}-{copy}",
                    arrival_ms=(copy * 10 + k) * 50.0,
                    tenant="t",
                    messages=({"role": "user", "content": text},),
                    max_tokens=32,
                    expected_output_tokens=16,
                    stream=k == 3,
                    labels=labels,
                )
            )
    write_workload(path, items, {"kind": "test", "seed": 0})


def test_bench_run_short(tmp_path: Path) -> None:
    workload = tmp_path / "w.jsonl"
    tiny_workload(workload)
    out = tmp_path / "out"
    argv = python_module_argv(
        "hybrid_gateway.cli", "bench", "run", "--workload", str(workload),
        "--strategies", "heavy-only,hybrid-cache", "--concurrency", "4", "--duration", "2",
        "--warmup", "0", "--base-config", str(EXAMPLE), "--out", str(out),
        "--startup-timeout", "60",
    )  # fmt: skip
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=240, env=child_env(), check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| strategy | p50 | p95 |" in done.stdout
    [json_path] = out.glob("bench-*.json")
    files = [p for p in out.glob(json_path.stem + "*") if p.is_file()]
    assert sorted(p.name[len(json_path.stem) :] for p in files) == [
        "-article.png", "-cost.png", "-latency.png", ".json", ".md",
    ]  # fmt: skip
    report = json.loads(json_path.read_text())
    by_strategy = {r["strategy"]: r for r in report["results"]}
    assert set(by_strategy) == {"heavy-only", "hybrid-cache"}
    for r in by_strategy.values():
        for key in ("qps", "success_rate", "quality_rate", "cache_hit_rate", "false_hit_rate",
                    "cost_per_1k_usd", "relative_cost", "gateway_cpu_ms_per_request"):  # fmt: skip
            assert key in r
        assert set(r["latency_ms"]) == {"p50", "p95", "p99"}
        assert r["requests"] > 0 and r["success_rate"] == 1.0
    heavy, cached = by_strategy["heavy-only"], by_strategy["hybrid-cache"]
    assert heavy["relative_cost"] == 1.0
    assert heavy["quality_rate"] == 1.0
    assert heavy["cache_hit_rate"] == 0.0
    assert cached["cache_hit_rate"] > 0
    assert cached["false_hit_rate"] == 0.0
    assert cached["relative_cost"] < 1.0
    assert list(heavy["lanes"]) == ["heavy"]


def test_first_sends_in_send_order() -> None:
    def sent_at(item: str, start: float) -> RequestResult:
        return RequestResult(
            item=item, start_s=start, latency_ms=1.0, ttft_ms=None, status=200,
            error_code=None, stream=False, lane=None, channel=None, rule=None, cache=None,
            cost_usd=None, mark_group=None, mark_ok=None,
        )  # fmt: skip

    seen = {"a"}
    results = [sent_at("b", 2.0), sent_at("a", 0.5), sent_at("b", 1.0), sent_at("c", 3.0)]
    assert first_sends(results, seen) == (False, False, True, True)
    assert seen == {"a", "b", "c"}
