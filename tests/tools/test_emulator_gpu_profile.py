"""The `h200` profiles follow the step times measured on an NVIDIA H200.

benchmarks/results/gpu/h200-batching-curves.json holds what
benchmarks/experiments/gpu_batching_curves.py measured there: bf16 decode steps of an 8B and a
32B model's shapes at batch 1-256 and 512-8,192 tokens of context, and prefill times.  The
emulator's step model (``BatchScheduler.step_seconds``) with the profile's settings must put each
measured batch within 20 % of its time (RMS 10 %), and its prefill rate within 10 % of the measured
tokens/s on long prompts.  docs/emulator.md has the table and the fit.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import pytest

from hybrid_gateway.tools.emulator.cli import configure, quality_from_args, settings_from_args
from hybrid_gateway.tools.emulator.engine import BatchScheduler, Sequence
from hybrid_gateway.tools.emulator.settings import H200_HEAVY, H200_LIGHT, EmulatorSettings
from hybrid_gateway.tools.workload.builder import BuildOptions, build
from hybrid_gateway.tools.workload.schema import WorkloadItem

from .test_emulator_article_profile import DATA, closed_loop

CURVES = Path(__file__).resolve().parents[2] / "benchmarks/results/gpu/h200-batching-curves.json"
MEASURED = {"h200-light": "llama-3.1-8b", "h200-heavy": "qwen2.5-32b"}
PROFILES = {"h200-light": H200_LIGHT, "h200-heavy": H200_HEAVY}


def measured(profile: str) -> dict[str, Any]:
    models: dict[str, Any] = json.loads(CURVES.read_text())["models"]
    return models[MEASURED[profile]]  # type: ignore[no-any-return]


def modelled_step_ms(settings: EmulatorSettings, batch: int, ctx: int) -> float:
    scheduler = BatchScheduler(settings.engine)
    scheduler.running = [Sequence(ctx, 10, 0.0) for _ in range(batch)]
    return scheduler.step_seconds([]) * 1000


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_step_model_follows_the_measured_decode_curve(name: str) -> None:
    settings = PROFILES[name]
    errors = []
    for point in measured(name)["decode"]:
        modelled = modelled_step_ms(settings, point["batch"], point["ctx"])
        errors.append((modelled - point["ms"]) / point["ms"])
    assert len(errors) >= 10
    assert max(abs(e) for e in errors) <= 0.20
    assert math.sqrt(sum(e * e for e in errors) / len(errors)) <= 0.10


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_prefill_rate_is_the_measured_one_on_long_prompts(name: str) -> None:
    settings = PROFILES[name]
    for point in measured(name)["prefill"]:
        if point["tokens"] >= 2048:
            rate = point["tokens"] / point["ms"] * 1000
            assert settings.engine.prefill_tps == pytest.approx(rate, rel=0.10)
            scheduler = BatchScheduler(settings.engine)
            prompt = Sequence(point["tokens"], 10, 0.0)
            alone = scheduler.step_seconds([prompt]) - scheduler.step_seconds([])
            assert alone * 1000 == pytest.approx(point["ms"], rel=0.10)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_kv_budget_fits_the_gpu_beside_the_weights(name: str) -> None:
    model = measured(name)
    kv_gib = PROFILES[name].engine.kv_budget_tokens * model["kv_bytes_per_token"] / 2**30
    weights_gib = model["params"] * 2 / 2**30  # bf16; the measured shape has no input embedding
    assert kv_gib + weights_gib <= 0.9 * 143771 / 1024  # vLLM's gpu_memory_utilization of 140.4
    assert kv_gib + weights_gib >= 0.8 * 143771 / 1024


def test_an_h200_pair_serves_100_clients_with_the_32b_model_several_times_slower() -> None:
    items: list[WorkloadItem] = build(BuildOptions(size=600, seed=7), DATA)
    light, heavy = closed_loop(H200_LIGHT, items, n=1200), closed_loop(H200_HEAVY, items, n=1200)
    assert heavy[0] > 2.5 * light[0] and heavy[1] > 2.5 * light[1]
    # all 100 run at once on 256 slots: the heavy p50 is a median answer's steps, no queue
    assert 1.0 < heavy[0] < 6.0


def test_the_cli_plays_the_tier_the_h200_profile_names(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    configure(parser)
    workload = tmp_path / "w.jsonl"
    workload.write_text("")
    args = parser.parse_args(["--profile", "h200-heavy", "--workload", str(workload)])
    settings = settings_from_args(args)
    assert settings.engine.max_num_seqs == 256 and settings.faults.error_rate == 0
    answers = quality_from_args(args, settings)
    assert answers is not None and answers.tier == "heavy"
