from __future__ import annotations

import asyncio
import gc

import pytest

from hybrid_gateway.observability.gc_pacer import GcPacer
from hybrid_gateway.observability.metrics import GatewayMetrics


async def test_collects_the_young_generation_every_interval() -> None:
    collected: list[int] = []
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) > 3:
            raise asyncio.CancelledError
        await asyncio.sleep(0)

    pacer = GcPacer(0.1, lambda g, s: None, collect=collected.append, sleep=sleep)
    with pytest.raises(asyncio.CancelledError):
        await pacer.run()
    assert slept == [0.1] * 4 and collected == [0, 0, 0]


async def test_interval_zero_leaves_collection_to_the_interpreter() -> None:
    collected: list[int] = []
    pacer = GcPacer(0, lambda g, s: None, collect=collected.append)
    await asyncio.wait_for(pacer.run(), 1)  # returns at once
    assert collected == []


def test_every_collection_is_timed_into_the_pause_histogram() -> None:
    metrics = GatewayMetrics()
    ticks = iter([10.0, 10.004, 20.0, 20.25])
    pacer = GcPacer(0.1, metrics.gc_pause, timer=lambda: next(ticks))
    pacer._callback("start", {"generation": 0})
    pacer._callback("stop", {"generation": 0, "collected": 3, "uncollectable": 0})
    pacer._callback("stop", {"generation": 1})  # a stop without a start is not counted
    pacer._callback("start", {"generation": 2})
    pacer._callback("stop", {"generation": 2, "collected": 0, "uncollectable": 0})
    text = metrics.render().decode()
    assert 'hybrid_gateway_gc_pause_seconds_bucket{generation="0",le="0.005"} 1' in text
    assert 'hybrid_gateway_gc_pause_seconds_bucket{generation="0",le="0.0025"} 0' in text
    assert 'hybrid_gateway_gc_pause_seconds_count{generation="2"} 1' in text
    assert 'generation="1"' not in text


def test_install_times_real_collections_and_uninstall_stops() -> None:
    seen: list[tuple[int, float]] = []
    pacer = GcPacer(0.1, lambda g, s: seen.append((g, s)))
    pacer.install()
    pacer.install()  # once only
    try:
        gc.collect(1)
    finally:
        pacer.uninstall()
    assert [g for g, _ in seen] == [1] and seen[0][1] >= 0
    gc.collect(0)
    assert len(seen) == 1


def test_pacing_keeps_full_collections_about_hourly() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(20_000, 50, 100)
        pacer = GcPacer(0.1, lambda g, s: None)
        pacer.install()
        assert gc.get_threshold() == (20_000, 50, 720)  # 3600 s / (0.1 s x 50)
        pacer.uninstall()
        assert gc.get_threshold() == (20_000, 50, 100)
        idle = GcPacer(0, lambda g, s: None)
        idle.install()  # not pacing: thresholds as they were
        assert gc.get_threshold() == (20_000, 50, 100)
        idle.uninstall()
    finally:
        gc.set_threshold(*before)
