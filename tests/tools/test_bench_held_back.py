"""What holds a missed goal line back: hand-made report rows (ablations, floor) and a stage's
repeats (the cache ceiling)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from hybrid_gateway.tools.bench.held_back import held_back, repeat_ceiling
from hybrid_gateway.tools.bench.report_md import verdict_tables
from hybrid_gateway.tools.workload.schema import WorkloadItem
from tests.tools.test_bench_floor import item, result


def row(
    strategy: str,
    *,
    p95_ms: float = 1200.0,
    quality: float = 0.995,
    hits: int = 350,
    semantic: int = 50,
    cost: float = 0.25,
    stage: str = "open",
    **extra: Any,
) -> dict[str, Any]:
    """A report row with passing figures unless told otherwise (1,000 requests)."""
    return {
        "strategy": strategy, "stage": stage, "requests": 1000,
        "latency_ms": {"p95": p95_ms},
        "complexity": {
            "simple": {"latency_ms": {"p95": 800.0}, "quality_rate": 0.999},
            "complex": {"latency_ms": {"p95": 4000.0}, "quality_rate": 0.98},
        },
        "relative_cost": cost, "cache_hit_rate": hits / 1000, "success_rate": 0.999,
        "quality_rate": quality, "false_hit_rate": 0.005,
        "project_x_counts": {"served_without_heavy": 850,
                             "hits_by_kind": {"exact": hits - semantic, "semantic": semantic}},
        **extra,
    }  # fmt: skip


def paraphrase_of(group: str, key: str, text: str) -> WorkloadItem:
    """An item of ``group``'s paraphrase group asked in other words."""
    made = item(key, text, 10, True)
    return replace(made, labels=replace(made.labels, group=group))


def by_key(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["key"]: e for e in entries}


def test_nothing_is_held_back_when_every_line_passes() -> None:
    full = row("full")
    assert held_back([full, row("full-no-semantic")], full) == []


def test_the_ablation_that_meets_a_line_names_the_part_and_by_how_much() -> None:
    full = row("full", p95_ms=1800.0, quality=0.985)
    results = [
        row("heavy-only", p95_ms=8000.0, cost=1.0),
        full,
        row("full-no-semantic", p95_ms=1400.0, quality=0.991),  # both lines met without it
        row("full-no-classifier", p95_ms=1700.0, quality=0.980),  # p95 nearer, quality worse
        row("full-no-degrade", p95_ms=2500.0, quality=0.97),  # worse on both
        row("full-no-semantic", p95_ms=100.0, stage="c100"),  # another stage: not read
    ]
    entries = by_key(held_back(results, full))
    assert list(entries) == ["p95_s", "quality"]
    p95 = entries["p95_s"]
    assert p95["short_by"] == pytest.approx(0.3)
    ablations = {a["strategy"]: a for a in p95["ablations"]}
    assert set(ablations) == {"full-no-semantic", "full-no-classifier", "full-no-degrade"}
    assert ablations["full-no-semantic"]["change"] == pytest.approx(-0.4)
    assert ablations["full-no-semantic"]["pass"] is True
    assert ablations["full-no-classifier"]["pass"] is False
    reading = p95["reading"]
    assert "short by 0.30 s" in reading
    assert (
        "Without the semantic cache it is met (1.40 s): the semantic cache holds it back by "
        "0.40 s." in reading
    )
    assert "Without the classifier it is 0.10 s nearer (1.70 s), still short." in reading
    assert "Removing any other part leaves it as far or further (without degradation" in reading
    quality = entries["quality"]
    assert quality["short_by"] == pytest.approx(0.005)
    assert "short by 0.5 points" in quality["reading"]
    assert "the semantic cache holds it back by 0.6 points" in quality["reading"]


def test_a_line_every_part_helps_is_held_back_by_no_part() -> None:
    full = row("full", quality=0.985)
    results = [full, row("full-no-semantic", quality=0.98), row("full-no-degrade", quality=0.95)]
    [entry] = held_back(results, full)
    assert entry["reading"].endswith(
        "Removing any part leaves it as far or further (without the semantic "
        "cache 98.0%; without degradation (retries, breakers + backup, deadline fallback, "
        "shedding) 95.0%)."
    )


def test_without_ablations_the_reading_says_how_to_get_them() -> None:
    full = row("full", cost=0.5)  # relative cost over 35 %
    [entry] = held_back([row("heavy-only", cost=1.0), full], full)
    assert entry["key"] == "relative_cost" and entry["ablations"] == []
    assert "No ablation ran at this stage" in entry["reading"]


def test_a_p95_bound_below_the_perfect_routers_floor_is_out_of_reach() -> None:
    floor = {"routed_p95_s": 1.55, "oracle_p95_s": 1.54, "ideal_p95_s": 1.31,
             "by_class": {"simple": {"routed_p95_s": 0.9, "oracle_p95_s": 0.8},
                          "complex": {"routed_p95_s": 5.6, "oracle_p95_s": 5.4,
                                      "ideal_p95_s": 5.2}}}  # fmt: skip
    full = row("full", p95_ms=1770.0, latency_floor=floor)
    full["complexity"]["complex"]["latency_ms"]["p95"] = 5580.0
    full["complexity"]["simple"]["latency_ms"]["p95"] = 1100.0
    entries = by_key(held_back([full], full))
    assert set(entries) == {"p95_s", "simple_p95_s", "complex_p95_s"}
    p95 = entries["p95_s"]
    assert p95["floor"] == {"routed_p95_s": 1.55, "oracle_p95_s": 1.54, "ideal_p95_s": 1.31}
    assert "their p95 is 1.54 s, 0.04 s past the bound" in p95["reading"]
    # serving every paraphrase too would reach it: the semantic cache's misses are named
    assert "every paraphrase of a question asked before would give 1.31 s" in p95["reading"]
    assert "queueing, batching and the gateway add +0.22 s" in p95["reading"]
    # the class lines read the class floors: simple is reachable, complex is not
    assert entries["complex_p95_s"]["floor"]["oracle_p95_s"] == 5.4
    assert "Out of any router's reach" in entries["complex_p95_s"]["reading"]
    assert "Even a cache serving every paraphrase too: 5.20 s." in entries[
        "complex_p95_s"]["reading"]  # fmt: skip
    simple = entries["simple_p95_s"]["reading"]
    assert "Out of any router's reach" not in simple
    assert "answers alone: p95 0.80 s" in simple and "add +0.20 s" in simple


def test_repeat_ceiling_counts_verbatim_and_paraphrase_repeats_in_order() -> None:
    items = {
        "a": item("a", "how do I reset it", 10, True),
        "a2": item("a2", "how do I reset it", 10, True),  # verbatim
        "b": item("b", "card arrival", 10, True),
        "c": paraphrase_of("b", "c", "when will my card come"),
        "d": item("d", "something new", 10, True),
    }
    results = [result("a", 0.0, "light"), result("b", 1.0, "light"),
               result("a2", 2.0, "light", "exact"), result("c", 3.0, "light"),
               result("d", 4.0, "light")]  # fmt: skip
    assert repeat_ceiling(results, items) == {"verbatim": 0.2, "paraphrase": 0.2, "any": 0.4}
    # a paraphrase asked before its first asking is not a repeat
    reordered = [result("c", 0.0, "light"), *results[:3]]
    assert repeat_ceiling(reordered, items) == {"verbatim": 0.25, "paraphrase": 0.25, "any": 0.5}
    # questions sent before the stage (its warm-up, earlier stages) count as asked before
    assert repeat_ceiling(results[3:], items, {"b", "zz"}) == {
        "verbatim": 0.0, "paraphrase": 0.5, "any": 0.5}  # fmt: skip
    assert repeat_ceiling(results[2:3], items, {"a"}) == {
        "verbatim": 1.0, "paraphrase": 0.0, "any": 1.0}  # fmt: skip
    assert repeat_ceiling([result("zz", 0.0, "light")], items) is None
    assert repeat_ceiling([], items) is None


def test_a_cache_line_under_the_repeat_ceiling_is_the_workloads() -> None:
    ceiling = {"verbatim": 0.15, "paraphrase": 0.14, "any": 0.29}
    full = row("full", hits=149, semantic=9, repeat_ceiling=ceiling)
    results = [full, row("full-no-semantic", hits=140, semantic=0)]
    [entry] = held_back(results, full)
    assert entry["key"] == "cache_hit_rate"
    assert entry["short_by"] == pytest.approx(0.151)
    assert entry["hits"] == {"exact": 0.14, "semantic": 0.009}
    reading = entry["reading"]
    assert (
        "29.0% of the stage's requests repeat a question the gateway was asked before (15.0% "
        "verbatim, 14.0% as a paraphrase); served: 14.0% exact, 0.9% semantic." in reading
    )
    assert "No cache can meet the line on this traffic" in reading
    assert "Removing any part leaves it as far or further" in reading  # fewer hits without
    # with more repeats than the bound, what the caches did not serve holds it back
    full["repeat_ceiling"] = {"verbatim": 0.15, "paraphrase": 0.16, "any": 0.31}
    [entry] = held_back(results, full)
    assert "A cache serving every repeat would meet it" in entry["reading"]
    assert "No cache can meet" not in entry["reading"]


def test_the_markdown_prints_each_reading_under_the_goal() -> None:
    full = row("full", p95_ms=1800.0)
    goal = {"strategy": "full", "stage": "open", "met": False, "lines": [],
            "latency_floor": None, "held_back": held_back([full], full)}  # fmt: skip
    text = "\n".join(verdict_tables({"goal": goal, "results": []}))
    assert "What holds each missed line back" in text
    assert "- **p95**: p95 1.80 s against <= 1.5 s: short by 0.30 s." in text
