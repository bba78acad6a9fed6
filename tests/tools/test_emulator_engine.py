"""The continuous-batching model, driven by a ManualClock: no test sleeps on the wall clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

import pytest

from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.tools.emulator.engine import (
    BatchScheduler,
    ContextTooLongError,
    Engine,
    Sequence,
)
from hybrid_gateway.tools.emulator.settings import EngineSettings

# Round numbers so expected times can be computed by hand: 10 ms per step, +1 ms per running
# sequence, +1 ms per 1,000 context tokens, prefill at 1,000 tokens/s.
SETTINGS = EngineSettings(
    max_num_seqs=4,
    prefill_tps=1000.0,
    decode_step_ms=10.0,
    per_seq_step_ms=1.0,
    per_kilotoken_step_ms=1.0,
    kv_budget_tokens=100_000,
)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def drive(clock: ManualClock, done: Callable[[], bool], step: float = 0.05) -> None:
    """Advance virtual time until ``done()``; fails instead of looping forever."""
    await settle()
    for _ in range(10_000):
        if done():
            return
        await clock.advance(step)
    raise AssertionError("engine did not finish in 500 virtual seconds")


def ttft(seq: Sequence) -> float:
    assert seq.first_token_at is not None
    return seq.first_token_at - seq.submitted_at


def per_token(seq: Sequence) -> float:
    assert seq.first_token_at is not None and seq.finished_at is not None
    return (seq.finished_at - seq.first_token_at) / (seq.output_tokens - 1)


# -- the pure scheduler -------------------------------------------------------------------------


def test_step_time_is_base_plus_batch_plus_context_plus_prefill() -> None:
    scheduler = BatchScheduler(SETTINGS)
    for _ in range(3):
        scheduler.enqueue(Sequence(prompt_tokens=500, output_tokens=10, submitted_at=0.0))
    admitted = scheduler.admit(0.0)
    assert len(admitted) == 3
    # 10 ms + 3 x 1 ms + 1,500 context tokens x 1 ms/1k + 1,500 prefill tokens / 1,000 tps
    assert scheduler.step_seconds(admitted) == pytest.approx(0.010 + 0.003 + 0.0015 + 1.5)
    scheduler.complete_step(1.5145)
    # next step: no prefill, context now holds one generated token each
    assert scheduler.step_seconds([]) == pytest.approx(0.010 + 0.003 + 0.001503)


def test_admission_is_fifo_and_never_preempts() -> None:
    scheduler = BatchScheduler(replace(SETTINGS, max_num_seqs=2))
    seqs = [Sequence(10, 5, submitted_at=float(i)) for i in range(4)]
    for seq in seqs:
        scheduler.enqueue(seq)
    assert scheduler.admit(0.0) == seqs[:2]
    assert scheduler.admit(0.0) == []  # full: the rest wait, nobody is evicted
    assert list(scheduler.waiting) == seqs[2:]


def test_head_of_queue_that_does_not_fit_blocks_smaller_ones_behind_it() -> None:
    scheduler = BatchScheduler(replace(SETTINGS, kv_budget_tokens=1000))
    big, huge, small = Sequence(500, 100, 0.0), Sequence(800, 100, 0.0), Sequence(10, 10, 0.0)
    for seq in (big, huge, small):
        scheduler.enqueue(seq)
    assert scheduler.admit(0.0) == [big]
    assert scheduler.kv_used == 600
    assert list(scheduler.waiting) == [huge, small]  # small fits but must not overtake


def test_a_request_larger_than_the_whole_kv_budget_is_refused() -> None:
    scheduler = BatchScheduler(replace(SETTINGS, kv_budget_tokens=1000))
    with pytest.raises(ContextTooLongError, match="budget is 1000"):
        scheduler.enqueue(Sequence(prompt_tokens=900, output_tokens=101, submitted_at=0.0))


# -- the engine on a manual clock ---------------------------------------------------------------


async def test_a_single_request_follows_the_cost_model_exactly() -> None:
    clock = ManualClock()
    async with Engine(SETTINGS, clock) as engine:
        seq = engine.submit(prompt_tokens=200, output_tokens=3)
        await drive(clock, lambda: seq.done)
    # step 1: 10 + 1 + 0.2 ms + 200 prefill tokens at 1,000/s
    first = 0.010 + 0.001 + 0.0002 + 0.2
    assert ttft(seq) == pytest.approx(first)
    # steps 2 and 3: context is 201 then 202 tokens
    assert seq.finished_at == pytest.approx(first + (0.011 + 0.000201) + (0.011 + 0.000202))
    assert seq.generated == 3


async def test_freed_slot_goes_to_the_waiting_request_at_the_next_step() -> None:
    clock = ManualClock()
    async with Engine(replace(SETTINGS, max_num_seqs=1), clock) as engine:
        first = engine.submit(prompt_tokens=10, output_tokens=5)
        second = engine.submit(prompt_tokens=10, output_tokens=5)
        await settle()
        assert (engine.stats().running, engine.stats().waiting) == (1, 1)
        await drive(clock, lambda: second.done)
    assert second.admitted_at == first.finished_at  # no idle gap between them
    assert engine.stats().kv_tokens_used == 0


async def test_ttft_and_per_token_latency_grow_with_batch_size() -> None:
    async def run(batch: int) -> Sequence:
        clock = ManualClock()
        async with Engine(replace(SETTINGS, max_num_seqs=64), clock) as engine:
            seqs = [engine.submit(prompt_tokens=100, output_tokens=20) for _ in range(batch)]
            await drive(clock, lambda: all(s.done for s in seqs))
        return seqs[0]

    alone, crowded = await run(1), await run(32)
    assert ttft(crowded) > ttft(alone) * 2  # 32 prefills share the first step
    assert per_token(crowded) > per_token(alone) * 3  # (10+32+3.2) ms vs (10+1+0.1) ms


async def test_long_sequences_slow_every_request_in_the_shared_batch() -> None:
    async def short_request_per_token(neighbour_prompt: int) -> float:
        clock = ManualClock()
        async with Engine(SETTINGS, clock) as engine:
            short = engine.submit(prompt_tokens=50, output_tokens=20)
            neighbours = [engine.submit(neighbour_prompt, 40) for _ in range(3)]
            await drive(clock, lambda: short.done and all(n.done for n in neighbours))
        return per_token(short)

    with_short, with_long = await short_request_per_token(50), await short_request_per_token(8000)
    assert with_long > with_short * 2  # 24k extra context tokens add 24 ms to every step


async def test_kv_budget_makes_requests_wait_although_slots_are_free() -> None:
    clock = ManualClock()
    async with Engine(replace(SETTINGS, max_num_seqs=8, kv_budget_tokens=900), clock) as engine:
        a = engine.submit(prompt_tokens=400, output_tokens=100)
        b = engine.submit(prompt_tokens=400, output_tokens=100)
        await settle()
        stats = engine.stats()
        assert (stats.running, stats.waiting, stats.kv_tokens_used) == (1, 1, 500)
        await drive(clock, lambda: b.done)
    assert a.finished_at is not None and b.admitted_at == a.finished_at
    assert ttft(b) > a.finished_at - a.submitted_at  # b waited for a's whole run


async def test_cancelling_a_running_request_frees_its_slot_and_budget() -> None:
    clock = ManualClock()
    async with Engine(replace(SETTINGS, max_num_seqs=1), clock) as engine:
        hog = engine.submit(prompt_tokens=10, output_tokens=10_000)
        queued = engine.submit(prompt_tokens=10, output_tokens=2)
        await drive(clock, lambda: hog.generated >= 3)
        engine.cancel(hog)
        await drive(clock, lambda: queued.done)
    assert hog.cancelled and hog.generated < 10
    assert queued.generated == 2


async def test_progress_yields_every_token_count_in_order() -> None:
    clock = ManualClock()
    async with Engine(SETTINGS, clock) as engine:
        seq = engine.submit(prompt_tokens=10, output_tokens=6)
        seen: list[int] = []

        async def consume() -> None:
            async for generated in seq.progress():
                seen.append(generated)

        consumer = asyncio.create_task(consume())
        await drive(clock, lambda: consumer.done(), step=0.001)
    assert seen == [1, 2, 3, 4, 5, 6]


async def test_a_slow_consumer_still_gets_every_token() -> None:
    clock = ManualClock()
    async with Engine(SETTINGS, clock) as engine:
        seq = engine.submit(prompt_tokens=10, output_tokens=6)
        seen: list[int] = []

        async def consume() -> None:
            async for generated in seq.progress():
                seen.append(generated)
                await clock.sleep(0.025)  # busy for about two decode steps per read

        consumer = asyncio.create_task(consume())
        await drive(clock, lambda: consumer.done(), step=0.001)
    assert seen[-1] == 6
    assert len(seen) < 6  # tokens were coalesced, none lost
    assert seen == sorted(set(seen))


async def test_same_inputs_give_the_same_timeline() -> None:
    async def timeline() -> list[tuple[float | None, float | None]]:
        clock = ManualClock()
        async with Engine(replace(SETTINGS, max_num_seqs=3), clock) as engine:
            seqs = [engine.submit(100 + 37 * i, 5 + i) for i in range(7)]
            await drive(clock, lambda: all(s.done for s in seqs))
        return [(s.first_token_at, s.finished_at) for s in seqs]

    first, second = await timeline(), await timeline()
    assert first == second
    assert len({end for _, end in first}) > 1  # and it is not trivially constant


async def test_close_releases_waiting_and_running_requests() -> None:
    clock = ManualClock()
    engine = Engine(replace(SETTINGS, max_num_seqs=1), clock)
    await engine.start()
    running = engine.submit(10, 100)
    waiting = engine.submit(10, 100)
    await settle()
    await engine.aclose()
    assert running.done and waiting.done
    await asyncio.wait_for(waiting.wait_done(), timeout=1)  # a waiter is woken, not stranded
