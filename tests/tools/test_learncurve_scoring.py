"""`bench learn`'s figures: the unseen split, router APGR and cost at the quality floor, cache
tallies, the Wilson bound, the `cache eval` curve lookup and the goals' verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.learncurve.report import markdown, verdicts
from hybrid_gateway.tools.learncurve.scoring import (
    cache_tally,
    curve_at,
    router_figures,
    split_interleaved,
    split_unseen,
    wilson_upper,
)
from hybrid_gateway.tools.workload.schema import Labels, WorkloadItem


def item(n: int, text: str) -> WorkloadItem:
    labels = Labels(True, True, "simple", "c", "s", f"g{n}", "en", "measured")
    return WorkloadItem(f"w{n}", 0.0, "t", ({"role": "user", "content": text},), 64, 8, False,
                        labels)  # fmt: skip


def test_the_unseen_part_never_repeats_a_question_the_first_part_asks() -> None:
    items = [item(i, t) for i, t in enumerate(["a", "b", "c", "b", "d", "d", "e"])]
    first, later = split_unseen(items, 4)
    assert [i.id for i in first] == ["w0", "w1", "w2"]
    assert [i.id for i in later] == ["w4", "w6"]  # "b" was asked before, the second "d" twice
    with pytest.raises(ValueError):
        split_unseen(items, 7)


def test_the_interleaved_unseen_part_is_spread_through_the_workload_and_never_sent() -> None:
    items = [item(i, t) for i, t in enumerate("abcdefghibkl")]
    first, later = split_interleaved(items, 4)  # every third item kept back: 0, 3, 6, 9
    assert [i.id for i in later] == ["w0", "w3", "w6"]  # w9 asks "b", which w1 sends
    assert [i.id for i in first] == ["w1", "w2", "w4", "w5", "w7", "w8", "w10", "w11"]
    assert {i.id for i in first}.isdisjoint(i.id for i in later)
    with pytest.raises(ValueError):
        split_interleaved(items, 12)


def test_a_perfect_router_recovers_the_gap_early_and_meets_the_floor_cheaply() -> None:
    weak = np.array([1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    strong = np.ones(8)
    perfect = router_figures(1 - weak, weak, strong, light_cost_ratio=0.1)
    backwards = router_figures(weak, weak, strong, light_cost_ratio=0.1)
    assert perfect["apgr"] > 0.85 > 0.3 > backwards["apgr"]
    assert perfect["heavy_share_at_floor"] == 0.25  # the two light failures go heavy
    assert perfect["relative_cost_at_floor"] == pytest.approx(0.25 + 0.75 * 0.1)
    assert backwards["heavy_share_at_floor"] == 1.0


def result(n: int, cache: str, group: str) -> RequestResult:
    return RequestResult(f"w{n}", 0.0, 1.0, None, 200, None, False, "light", "c", "default",
                         cache, 0.0, group, True)  # fmt: skip


def test_cache_tally_counts_semantic_hits_marked_with_another_group_as_false() -> None:
    groups = {f"w{n}": f"g{n}" for n in range(5)}
    results = [result(0, "miss", "g0"), result(1, "semantic", "g1"),
               result(2, "semantic", "g9"), result(3, "exact", "g3"),
               result(4, "semantic", "g4")]  # fmt: skip
    tally = cache_tally(results, groups)
    assert (tally.requests, tally.hits, tally.false_hits) == (5, 3, 1)
    assert tally.hit_rate == pytest.approx(0.6)
    assert tally.as_json()["false_hit_rate"] == pytest.approx(0.3333)


def test_wilson_upper_matches_the_docs_rule_of_thumb() -> None:
    assert wilson_upper(0, 100) == pytest.approx(3.84 / 103.84, abs=2e-3)
    assert wilson_upper(0, 0) == 1.0
    assert wilson_upper(5, 10) > 0.5


def test_curve_at_reads_the_row_a_threshold_selects(tmp_path: Path) -> None:
    curve = tmp_path / "x-curve.csv"
    curve.write_text("rule,threshold,precision,recall,hit_rate,hits\n"
                     "plain,0.90,0.5,1.0,1.0,10\nplain,0.95,0.8,0.6,0.5,5\n"
                     "plain,0.99,1.0,0.2,0.1,1\nverifier,0.5,1,1,1,1\n")  # fmt: skip
    assert curve_at(curve, 0.93) == {"threshold": 0.95, "precision": 0.8, "recall": 0.6,
                                     "hit_rate": 0.5, "hits": 5.0}  # fmt: skip
    assert curve_at(curve, 0.999) is None


def report(gain: float, share: float, hits: tuple[int, int], false: int) -> dict[str, Any]:
    scores = [{"model": "shipped", "labels": 0, "apgr": 0.55},
              {"model": "learned@100", "labels": 100, "apgr": 0.55 + gain}]  # fmt: skip
    for s in scores:
        s.update(cpt50=0.4, cpt80=0.7, heavy_share_at_floor=0.9, relative_cost_at_floor=0.91)

    def run(n: int, f: int) -> dict[str, Any]:  # fmt: skip
        total = {"requests": 100, "hits": n, "false_hits": f, "hit_rate": n / 100,
                 "false_hit_rate": f / n}  # fmt: skip
        return {"total": total, "labels": n, "final_threshold": 0.99}

    return {
        "command": "x", "started_at": "2026-01-01T00:00:00", "wall_s": 1.0,
        "router": {"first_part": 10, "unseen_part": 5, "scores": scores, "checkpoints": [
            {"target": 100, "labels": 100, "requests": 2000, "audit_share_of_heavy_only": share,
             "accepted": True, "train_exit": 0, "replay": {}}]},
        "cache": {"settings": {"target_precision": 0.95}, "bundled_threshold": 0.995,
                  "runs": {"bundled": run(hits[0], 0), "learned": run(hits[1], false)},
                  "held_out": []},
    }  # fmt: skip


def test_verdicts_say_met_only_when_each_goal_holds() -> None:
    met = report(0.12, 0.045, (10, 25), 1)
    assert [v["met"] for v in verdicts(met)] == [True, True, True, True]
    missed = report(0.05, 0.06, (10, 15), 2)
    assert [v["met"] for v in verdicts(missed)] == [False, False, False, False]
    met["verdicts"] = verdicts(met)
    assert "| learned@100 | 0.67 |" in markdown(met)


def test_the_cache_verdicts_read_the_unseen_workload_when_the_run_has_one() -> None:
    """The learning run serves fewer hits while its threshold is still moving; the goal is
    what the learned threshold serves once learned, on questions its audits never saw."""
    learning = report(0.12, 0.045, (100, 120), 2)  # 1.2x over the learning run itself
    unseen = {"bundled": {"threshold": 0.995, "requests": 50, "hits": 10, "false_hits": 0,
                          "hit_rate": 0.2, "false_hit_rate": 0.0},
              "learned": {"threshold": 0.99, "requests": 50, "hits": 21, "false_hits": 1,
                          "hit_rate": 0.42, "false_hit_rate": 1 / 21}}  # fmt: skip
    assert [v["met"] for v in verdicts(learning)][2:] == [False, True]
    learning["cache"]["unseen"] = unseen
    lines = verdicts(learning)[2:]
    assert [v["met"] for v in lines] == [True, True]
    assert lines[0]["measured"] == 2.1 and "unseen workload" in lines[0]["goal"]
    unseen["learned"].update(false_hits=2, false_hit_rate=2 / 21)
    assert [v["met"] for v in verdicts(learning)][2:] == [True, False]
    learning["verdicts"] = verdicts(learning)
    assert "| learned 0.99 | 50 | 21 | 0.42 | 2 |" in markdown(learning)
