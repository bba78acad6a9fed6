"""The `article` profiles on the bench's default workload reproduce the article's heavy-only row.

Virtual time: a closed loop of 100 clients through the pure ``BatchScheduler``, each request a
workload item with its own prompt and answer length (as the quality emulator serves it).  The
article (REQUIREMENTS.md section 8): heavy-only at 100 concurrency, p50 1.8 s, p95 8.5 s; the
profile must land within 15 %.  docs/emulator.md has the same run over real HTTP.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from hybrid_gateway.accounting.tokens import count_tokens
from hybrid_gateway.tools.emulator.cli import configure, settings_from_args
from hybrid_gateway.tools.emulator.engine import BatchScheduler, Sequence
from hybrid_gateway.tools.emulator.settings import ARTICLE_HEAVY, ARTICLE_LIGHT, EmulatorSettings
from hybrid_gateway.tools.workload.builder import BuildOptions, build
from hybrid_gateway.tools.workload.schema import WorkloadItem

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.fixture(scope="module")
def items() -> list[WorkloadItem]:
    return build(BuildOptions(size=2000, seed=7), DATA)


def closed_loop(
    settings: EmulatorSettings, items: list[WorkloadItem], clients: int = 100, n: int = 3000
) -> tuple[float, float]:
    """(p50, p95) seconds of end-to-end latency, the first fifth dropped as warm-up."""
    scheduler = BatchScheduler(settings.engine)
    sent = 0

    def send(now: float) -> None:
        nonlocal sent
        item = items[sent % len(items)]
        sent += 1
        prompt = count_tokens(str(item.messages[-1]["content"])) + 6
        output = min(item.expected_output_tokens, item.max_tokens)
        scheduler.enqueue(Sequence(prompt, output, now))

    for _ in range(clients):
        send(0.0)
    done: list[float] = []
    now = 0.0
    while len(done) < n:
        now += scheduler.step_seconds(scheduler.admit(now))
        for seq in scheduler.complete_step(now):
            done.append(now - seq.submitted_at)
            send(now)
    steady = sorted(done[n // 5 :])
    return steady[len(steady) // 2], steady[int(0.95 * len(steady))]


def test_heavy_only_at_100_clients_is_within_15_percent_of_the_article(
    items: list[WorkloadItem],
) -> None:
    p50, p95 = closed_loop(ARTICLE_HEAVY, items)
    assert p50 == pytest.approx(1.8, rel=0.15)
    assert p95 == pytest.approx(8.5, rel=0.15)
    assert ARTICLE_HEAVY.faults.error_rate == pytest.approx(1 - 0.982, abs=0.001)


def test_the_light_model_is_several_times_faster_under_the_same_load(
    items: list[WorkloadItem],
) -> None:
    light, heavy = closed_loop(ARTICLE_LIGHT, items), closed_loop(ARTICLE_HEAVY, items)
    assert light[0] < heavy[0] / 3 and light[1] < heavy[1] / 3
    assert light[0] == pytest.approx(0.6, rel=0.25)  # the article's hybrid row: p50 0.6 s


def test_the_cli_keeps_the_profiles_faults_and_tier() -> None:
    parser = argparse.ArgumentParser()
    configure(parser)
    settings = settings_from_args(parser.parse_args(["--profile", "article-heavy"]))
    assert settings.faults.error_rate == 0.018 and settings.engine.max_num_seqs == 128
    quiet = settings_from_args(
        parser.parse_args(["--profile", "article-heavy", "--error-rate", "0"])
    )
    assert quiet.faults.error_rate == 0.0  # a flag given overrides the profile
