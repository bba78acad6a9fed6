"""`bench run`'s arithmetic, checked against small cases computed by hand."""

from __future__ import annotations

import dataclasses

import pytest

from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.bench.stats import (
    Scored,
    group_by,
    is_cache_hit,
    is_false_hit,
    is_quality,
    is_success,
    per_request_ms,
    percentile,
    ratio,
    score,
    stage_span_s,
    summarise,
)
from hybrid_gateway.tools.workload.schema import Labels


def labels(group: str, heavy_ok: bool = True, complexity: str = "simple") -> Labels:
    return Labels(
        light_ok=True, heavy_ok=heavy_ok, complexity=complexity, category="c", source="s",
        group=group, lang="en", outcome="assumed",
    )  # fmt: skip


def result(
    item: str = "i1",
    *,
    latency: float = 100.0,
    status: int = 200,
    mark: tuple[str, bool] | None = ("g1", True),
    cache: str | None = "miss",
    cost: float | None = 0.001,
    lane: str | None = "heavy",
    ttft: float | None = None,
    start: float = 0.0,
) -> RequestResult:
    return RequestResult(
        item=item, start_s=start, latency_ms=latency, ttft_ms=ttft, status=status,
        error_code=None if status == 200 else "x", stream=ttft is not None, lane=lane,
        channel=None, rule=None, cache=cache, cost_usd=cost,
        mark_group=None if mark is None else mark[0], mark_ok=None if mark is None else mark[1],
    )  # fmt: skip


def test_percentile_linear_interpolation_by_hand() -> None:
    values = [40.0, 10.0, 30.0, 20.0]  # sorted 10 20 30 40, n-1 = 3
    assert percentile(values, 0) == 10.0
    assert percentile(values, 100) == 40.0
    assert percentile(values, 50) == pytest.approx(25.0)  # rank 1.5: 20 + 0.5 * 10
    assert percentile(values, 95) == pytest.approx(38.5)  # rank 2.85: 30 + 0.85 * 10
    assert percentile(values, 99) == pytest.approx(39.7)  # rank 2.97
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_percentile_of_1_to_100() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 95) == pytest.approx(95.05)
    assert percentile(values, 99) == pytest.approx(99.01)


def test_quality_rules() -> None:
    good = labels("g1", heavy_ok=True)
    assert is_quality(result(mark=("g1", True)), good)
    assert not is_quality(result(mark=("g1", False)), good)  # wrong where heavy is right
    assert is_quality(result(mark=("g1", False)), labels("g1", heavy_ok=False))  # heavy fails too
    assert not is_quality(result(mark=("g2", True)), good)  # answer to another question
    assert not is_quality(result(status=503, mark=None), good)
    assert not is_quality(result(mark=None), good)
    assert not is_quality(result(), None)  # unknown item
    broken = dataclasses.replace(result(mark=("g1", True)), error_code="incomplete_stream")
    assert not is_success(broken) and not is_quality(broken, good)
    assert is_success(result())


def test_cache_hits_and_false_hits() -> None:
    assert not is_cache_hit(result(cache="miss"))
    assert not is_cache_hit(result(cache="bypass"))
    assert not is_cache_hit(result(cache=None))
    assert is_cache_hit(result(cache="exact"))
    assert is_false_hit(result(cache="exact", mark=("g2", True)), labels("g1"))
    assert not is_false_hit(result(cache="exact", mark=("g1", True)), labels("g1"))
    assert not is_false_hit(result(cache="miss", mark=("g2", True)), labels("g1"))


def test_summarise_by_hand() -> None:
    lab = {"a": labels("ga"), "b": labels("gb", heavy_ok=False), "c": labels("gc")}
    rows = [
        result("a", latency=100, mark=("ga", True), cost=0.002),  # ok
        result("b", latency=200, mark=("gb", False), cost=0.001),  # ok: heavy fails too
        result("c", latency=300, mark=("ga", True), cache="exact", cost=0.0),  # false hit
        result("a", latency=400, mark=("ga", True), cache="exact", cost=0.0),  # good hit
        result("c", latency=500, status=503, mark=None, cache=None, cost=None),  # HTTP failure
    ]
    stats = summarise(score(rows, lab), duration_s=2.0)
    assert stats.requests == 5
    assert stats.qps == pytest.approx(2.5)
    assert stats.latency_ms["p50"] == pytest.approx(300.0)
    assert stats.latency_ms["p95"] == pytest.approx(480.0)  # rank 3.8: 400 + 0.8 * 100
    assert stats.latency_ms["p99"] == pytest.approx(496.0)
    assert stats.success_rate == pytest.approx(0.8)
    assert stats.quality_rate == pytest.approx(0.6)
    assert stats.cache_hit_rate == pytest.approx(0.4)
    assert stats.false_hit_rate == pytest.approx(0.5)
    assert stats.cost_per_1k_usd == pytest.approx(0.6)  # 0.003 / 5 * 1000
    assert stats.missing_cost == 0
    assert stats.ttft_ms == {"p50": None, "p95": None}


def test_summarise_streams_empty_and_unknown() -> None:
    rows = [result(ttft=10.0), result(ttft=30.0), result("zz")]
    stats = summarise(score(rows, {"i1": labels("g1")}), duration_s=None)
    assert stats.ttft_ms["p50"] == pytest.approx(20.0)
    assert stats.streams == 2
    assert stats.unknown_items == 1
    assert stats.qps is None
    empty = summarise([], 1.0)
    assert empty.success_rate is None and empty.cost_per_1k_usd is None
    assert empty.false_hit_rate is None and empty.latency_ms["p50"] is None


def test_helpers() -> None:
    assert ratio(1, 4) == 0.25
    assert ratio(1, 0) is None and ratio(None, 1) is None
    assert per_request_ms(0.5, 100) == pytest.approx(5.0)
    assert per_request_ms(0.5, 0) is None
    assert stage_span_s([result(start=1.0, latency=500), result(start=2.0, latency=100)]) == 2.1
    assert stage_span_s([]) is None
    scored = [Scored(result(lane="light"), None), Scored(result(lane="heavy"), None)]
    assert list(group_by(scored, lambda s: s.result.lane or "none")) == ["heavy", "light"]
