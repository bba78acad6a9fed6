"""`hybrid-gateway bench run` end to end: real emulators, gateway and load generator, short."""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
from pathlib import Path

from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.bench.stages import (
    StageSpec,
    Stretch,
    aligned_stretches,
    first_sends,
    loadgen_args,
)
from hybrid_gateway.tools.processes import child_env, python_module_argv
from hybrid_gateway.tools.workload.schema import (
    Labels,
    WorkloadItem,
    read_workload,
    write_workload,
)

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


def bench_cli(
    tmp_path: Path, *extra: str, timeout_s: float = 240
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`bench run` on the tiny workload (written to ``tmp_path``); returns the report folder."""
    workload = tmp_path / "w.jsonl"
    tiny_workload(workload)
    out = tmp_path / "out"
    argv = python_module_argv(
        "hybrid_gateway.cli", "bench", "run", "--workload", str(workload),
        "--base-config", str(EXAMPLE), "--out", str(out), *extra,
    )  # fmt: skip
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout_s, env=child_env(), check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done, out


def test_bench_run_short(tmp_path: Path) -> None:
    done, out = bench_cli(
        tmp_path, "--strategies", "heavy-only,hybrid-cache", "--concurrency", "4",
        "--duration", "2", "--warmup", "0", "--startup-timeout", "60",
    )  # fmt: skip
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


def test_capped_stages_replay_the_same_stretch_for_each_strategy(tmp_path: Path) -> None:
    """--max-requests 6, 1 s warm-up of 2 s stages: warm-up cap 3, stride 9 (30 items)."""
    _, out = bench_cli(
        tmp_path, "--strategies", "heavy-only,hybrid-cache", "--concurrency", "2,3",
        "--duration", "2", "--warmup", "1", "--max-requests", "6", "--startup-timeout", "60",
        "--no-plots",
    )  # fmt: skip
    workload = tmp_path / "w.jsonl"
    [json_path] = out.glob("bench-*.json")
    report = json.loads(json_path.read_text())
    order = [item.id for item in read_workload(workload)]

    def positions(path: Path) -> list[int]:
        return [order.index(json.loads(line)["item"]) for line in path.read_text().splitlines()]

    for row in report["results"]:
        stage = {"c2": 0, "c3": 1}[row["stage"]]
        measured = Path(row["results_file"])
        assert row["requests"] > 0 and row["item_range"] is not None
        sent = positions(measured)
        assert min(sent) == 9 * stage + 3 and max(sent) < 9 * stage + 9  # its own stretch
        warm = positions(measured.with_name(f"{row['stage']}-warmup.jsonl"))
        assert warm and all(9 * stage <= i < 9 * stage + 3 for i in warm)
    # (the report's stretch warning reads w000123-style ids; these are q-ids: the unit tests in
    # test_bench_report.py check it)


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


def stage_args(**given: object) -> argparse.Namespace:
    values: dict[str, object] = {"max_requests": 4700, "warmup": 10.0, "duration": 180.0}
    values.update(given)
    return argparse.Namespace(**values)


def test_every_strategys_stage_replays_the_same_stretch_when_capped() -> None:
    # warm-up cap W = ceil(4700 * 10 / 180) = 262; stride 4,962
    stretches = aligned_stretches(stage_args(), stages=4, items=21788)
    assert stretches == [
        Stretch(0, 262, 262),
        Stretch(4962, 262, 5224),
        Stretch(9924, 262, 10186),
        Stretch(14886, 262, 15148),
    ]
    # each stretch (warm-up + measured) ends before the next one starts: nothing re-sent
    assert stretches is not None
    for this, after in itertools.pairwise(stretches):
        assert this.start + 4700 <= after.warmup_start
    unwarmed = aligned_stretches(stage_args(warmup=0.0), 2, 100 * 4700)
    assert unwarmed is not None and unwarmed[1] == Stretch(4700, 0, 4700)


def test_without_a_cap_or_items_enough_stages_continue_as_before() -> None:
    assert aligned_stretches(stage_args(max_requests=None), stages=4, items=10**6) is None
    assert aligned_stretches(stage_args(), stages=4, items=4 * 4962 - 1) is None


def test_an_aligned_warm_up_has_its_own_cap() -> None:
    spec = StageSpec("c20", 20, "closed")
    args = argparse.Namespace(max_requests=4700, time_scale=1.0)
    argv = loadgen_args(args, Path("w.jsonl"), "http://127.0.0.1:1", spec, 10.0, 4962, 262)
    assert argv[argv.index("--start-offset") + 1] == "4962"
    assert argv[argv.index("--max-requests") + 1] == "262"
    measured = loadgen_args(args, Path("w.jsonl"), "http://127.0.0.1:1", spec, 180.0, 5224)
    assert measured[measured.index("--max-requests") + 1] == "4700"
