"""Calibration meets its target on new data, on a synthetic set whose answer is known."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from hybrid_gateway.cache.semantic.calibrate import (
    NEVER,
    CurvePoint,
    best_recall_at,
    calibrate_threshold,
    curve,
    operating,
    roc_auc,
    wilson_lower,
)
from hybrid_gateway.cache.semantic.curves import write_csv
from hybrid_gateway.cache.semantic.evaluate import measured


def synthetic(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Same pairs score ~ N(0.95, 0.03), different ~ N(0.88, 0.03), half and half."""
    rng = np.random.default_rng(seed)
    labels = rng.random(n) < 0.5
    scores = np.where(labels, rng.normal(0.95, 0.03, n), rng.normal(0.88, 0.03, n))
    return scores, labels


def true_precision(threshold: float) -> float:
    """The population precision at a threshold, from the two normal distributions."""

    def tail(mu: float, sd: float) -> float:
        return 0.5 * math.erfc((threshold - mu) / (sd * math.sqrt(2)))

    pos, neg = tail(0.95, 0.03), tail(0.88, 0.03)
    return pos / (pos + neg)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_calibrated_threshold_meets_the_target_on_held_out_pairs(seed: int) -> None:
    dev_scores, dev_labels = synthetic(4000, seed)
    threshold = calibrate_threshold(dev_scores, dev_labels, target=0.95)
    assert math.isfinite(threshold)
    # the population precision at the chosen threshold is at or above the target ...
    assert true_precision(threshold) >= 0.95
    # ... and a fresh sample's realised precision stays within 2 points of it
    test_scores, test_labels = synthetic(20_000, seed + 100)
    realised = operating(test_scores, test_labels, threshold)
    assert realised.precision >= 0.93
    # the caution costs recall against the best threshold chosen on the test set itself, but
    # the chosen threshold still answers from cache
    oracle = best_recall_at(test_scores, test_labels, 0.95)
    assert 0.05 < realised.recall <= oracle.recall + 0.05


def test_no_threshold_when_the_target_is_out_of_reach() -> None:
    scores = np.linspace(0, 1, 100)
    labels = np.arange(100) % 2 == 0  # precision 0.5 everywhere
    assert calibrate_threshold(scores, labels, 0.95) == NEVER
    assert operating(scores, labels, NEVER).hits == 0


def test_wilson_bound_is_below_the_estimate_and_tightens_with_n() -> None:
    small = wilson_lower(np.array([19.0]), np.array([20.0]), 1.645)[0]
    large = wilson_lower(np.array([950.0]), np.array([1000.0]), 1.645)[0]
    assert small < 0.95 < 0.96 and large < 0.95 and small < large


def test_auc_known_values_and_vetoed_pairs_rank_last() -> None:
    labels = np.array([True, True, False, False])
    assert roc_auc(np.array([0.9, 0.8, 0.2, 0.1]), labels) == 1.0
    assert roc_auc(np.array([0.1, 0.2, 0.8, 0.9]), labels) == 0.0
    assert roc_auc(np.array([0.5, 0.5, 0.5, 0.5]), labels) == 0.5
    assert roc_auc(np.array([0.9, -math.inf, 0.2, 0.1]), labels) == 0.5


def test_curve_is_monotone_in_hit_rate() -> None:
    scores, labels = synthetic(1000, 9)
    points = curve(scores, labels, steps=21)
    assert len(points) == 21
    rates = [p.hit_rate for p in points]
    assert rates == sorted(rates, reverse=True) and rates[0] == 1.0


def test_a_rule_without_a_threshold_claims_no_precision() -> None:
    scores, labels = synthetic(60, seed=1)
    rule = measured(scores, labels, scores, labels, target=0.999, z=1.645)
    out = rule.as_json()
    assert out["threshold"] is None and out["target_met"] is False and out["recall"] == 0.0
    assert out["precision"] is None and out["dev_precision"] is None  # no hits: undefined
    json.dumps(out, allow_nan=False)
    # a threshold met on DEV that no TEST pair reaches: met, but no TEST precision
    low = measured(scores, labels, scores - 1.0, labels, target=0.8, z=1.645).as_json()
    assert low["target_met"] is True and low["precision"] is None
    assert isinstance(low["dev_precision"], float) and low["dev_precision"] >= 0.8


def test_one_class_or_no_pairs_give_valid_json() -> None:
    scores, labels = synthetic(200, seed=2)
    same = labels.copy()
    one_class = measured(scores, labels, scores[same], labels[same], 0.9, 1.645).as_json()
    assert one_class["auc"] is None and json.dumps(one_class, allow_nan=False)
    nothing = measured(scores, labels, scores[:0], labels[:0], 0.9, 1.645).as_json()
    assert nothing["n"] == 0 and nothing["precision"] is None and nothing["auc"] is None
    json.dumps(nothing, allow_nan=False)


def test_the_curve_csv_leaves_the_precision_of_no_hits_empty(tmp_path: Path) -> None:
    points = [CurvePoint(0.5, 0.75, 1.0, 0.8, 4), CurvePoint(0.9, 1.0, 0.0, 0.0, 0)]
    write_csv(tmp_path / "c.csv", {"plain": points})
    rows = (tmp_path / "c.csv").read_text().splitlines()
    assert rows[1] == "plain,0.500000,0.750000,1.000000,0.800000,4"
    assert rows[2] == "plain,0.900000,,0.000000,0.000000,0"
