"""The light and heavy profiles reproduce the brief's latency figures (virtual time).

A closed loop of N clients runs through the pure ``BatchScheduler``: each client sends its next
request the moment its previous one finishes.  Prompts hold 100-400 tokens; answer lengths come
from ``PseudoAnswers`` as in the server.  ``docs/emulator.md`` reports the same figures and the
matching real-time measurement over HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from hybrid_gateway.tools.emulator.engine import BatchScheduler, Sequence
from hybrid_gateway.tools.emulator.settings import HEAVY, LIGHT, EmulatorSettings
from hybrid_gateway.tools.emulator.text import Prompt, PseudoAnswers, stable_hash


@dataclass(frozen=True)
class Figures:
    ttft_p50: float
    ttft_p95: float
    total_p50: float
    total_p95: float


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def closed_loop(settings: EmulatorSettings, clients: int, requests: int = 1500) -> Figures:
    scheduler = BatchScheduler(settings.engine)
    answers = PseudoAnswers(settings.min_output_tokens, settings.max_output_tokens)
    sent = 0

    def send(now: float) -> None:
        nonlocal sent
        text = f"question {sent}"
        prompt = Prompt(text=text, last_user=text, tokens=100 + stable_hash(text) % 301)
        scheduler.enqueue(Sequence(prompt.tokens, answers.target_tokens(prompt), now))
        sent += 1

    for _ in range(clients):
        send(0.0)
    finished: list[Sequence] = []
    now = 0.0
    while len(finished) < requests:
        now += scheduler.step_seconds(scheduler.admit(now))
        for seq in scheduler.complete_step(now):
            finished.append(seq)
            send(now)
    steady = finished[requests // 5 :]  # drop the warm-up
    ttft = [s.first_token_at - s.submitted_at for s in steady if s.first_token_at is not None]
    total = [s.finished_at - s.submitted_at for s in steady if s.finished_at is not None]
    return Figures(
        percentile(ttft, 0.5),
        percentile(ttft, 0.95),
        percentile(total, 0.5),
        percentile(total, 0.95),
    )


def test_light_ttft_is_well_under_300_ms_off_peak_and_under_1_s_at_peak() -> None:
    off_peak, peak = closed_loop(LIGHT, 1), closed_loop(LIGHT, 100)
    assert off_peak.ttft_p95 < 0.3
    assert peak.ttft_p95 < 1.0
    assert peak.ttft_p50 > 5 * off_peak.ttft_p50  # but it does feel the load


def test_heavy_takes_about_1_5_s_off_peak_and_8_to_12_s_p95_at_100_concurrent() -> None:
    off_peak, peak = closed_loop(HEAVY, 1), closed_loop(HEAVY, 100)
    assert off_peak.total_p50 == pytest.approx(1.5, abs=0.25)
    assert 8.0 <= peak.total_p95 <= 12.0


def test_heavy_queues_at_peak_while_light_mostly_batches() -> None:
    heavy, light = closed_loop(HEAVY, 100), closed_loop(LIGHT, 100)
    assert heavy.ttft_p50 > 3.0  # 68 of 100 wait for one of 32 slots
    assert light.ttft_p50 < 1.0
