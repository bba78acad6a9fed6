"""Automatic prefix caching in the emulator: a cached prefix is not prefilled again."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.tools.emulator.engine import Engine, SequenceGroup
from hybrid_gateway.tools.emulator.prefix_cache import PrefixCache, prompt_blocks
from hybrid_gateway.tools.emulator.settings import EngineSettings

# 10 ms per step, prefill at 1,000 tokens/s; blocks of 16 tokens (64 characters)
SETTINGS = EngineSettings(max_num_seqs=4, prefill_tps=1000.0, decode_step_ms=10.0,
                          per_seq_step_ms=0.0, per_kilotoken_step_ms=0.0,
                          prefix_cache_tokens=16 * 100, prefix_block_tokens=16)  # fmt: skip
SYSTEM = "x" * 64 * 10  # ten whole blocks


def test_blocks_chain_so_a_shared_key_means_a_shared_prefix() -> None:
    a = prompt_blocks(SYSTEM + "first", 16).keys
    b = prompt_blocks(SYSTEM + "y" * 64, 16).keys
    c = prompt_blocks("z" + SYSTEM, 16).keys
    assert len(a) == 10 and len(b) == 11 and a == b[:10]
    assert not set(a) & set(c)  # the same blocks after a different start are other keys


def test_hits_count_leading_blocks_only_and_the_lru_stays_within_capacity() -> None:
    cache = PrefixCache(capacity_tokens=16 * 12, block_tokens=16)
    blocks = prompt_blocks(SYSTEM, 16)
    assert cache.admit(blocks, 170) == 0
    assert cache.admit(blocks, 170) == 170  # every character cached: all its tokens
    assert cache.admit(prompt_blocks("other" + SYSTEM, 16), 170) == 0  # evicts the oldest
    stats = cache.stats()
    assert stats.prefix_cached_blocks == 12
    assert (stats.prefix_lookups, stats.prefix_hits, stats.prefix_hit_tokens) == (3, 1, 170)
    assert cache.admit(blocks, 170) == 0  # its first blocks were evicted: nothing leads
    fresh = PrefixCache(capacity_tokens=16 * 100, block_tokens=16)
    assert fresh.admit(prompt_blocks(SYSTEM, 16), 200) == 0
    longer = prompt_blocks(SYSTEM + "z" * 640, 16)
    assert fresh.admit(longer, 300) == 150  # 640 of 1,280 characters cached: half its tokens


async def first_token(engine: Engine, clock: ManualClock, text: str, tokens: int) -> float:
    group: SequenceGroup = engine.submit_group(tokens, [2], text)
    for _ in range(1000):
        for _ in range(5):
            await asyncio.sleep(0)
        if group.done:
            break
        await clock.advance(0.005)
    seq = group.seqs[0]
    assert seq.first_token_at is not None
    return seq.first_token_at - seq.submitted_at


async def test_a_repeated_prefix_is_prefilled_once() -> None:
    clock = ManualClock()
    async with Engine(SETTINGS, clock) as engine:
        cold = await first_token(engine, clock, SYSTEM + "question one", 163)
        warm = await first_token(engine, clock, SYSTEM + "question two", 163)
        stats = engine.stats()
    assert cold == pytest.approx(0.010 + 0.163, abs=0.006)
    # 640 of 652 characters cached: 160 of 163 tokens
    assert warm == pytest.approx(0.010 + 0.003, abs=0.006)
    assert (stats.prefix_lookups, stats.prefix_hit_tokens, stats.prefix_lookup_tokens) == (
        2, 160, 326)  # fmt: skip


async def test_off_by_default_every_prompt_is_prefilled_in_full() -> None:
    clock = ManualClock()
    async with Engine(replace(SETTINGS, prefix_cache_tokens=0), clock) as engine:
        await first_token(engine, clock, SYSTEM, 160)
        again = await first_token(engine, clock, SYSTEM, 160)
        assert engine.stats().prefix_lookups == 0
    assert again == pytest.approx(0.170, abs=0.006)
