from __future__ import annotations

import numpy as np
import pytest

from hybrid_gateway.routing.calibration import calibrate


def synthetic() -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """120 prompts; the heavy model gets every one right.

    hard  (20): the light model fails all -> light quality 0 -> gated at any useful floor
    easy  (60): the light model gets all right, P(complex) 0.2
    no category (40): the light model fails two (P 0.8 and 0.6), passes 38 (P 0.5)

    (A judged category is either gated or at least at the floor on its own, so only prompts
    without a judged category can need the threshold.)
    """
    p = [0.9] * 20 + [0.2] * 60 + [0.8, 0.6] + [0.5] * 38
    weak = [0.0] * 20 + [1.0] * 60 + [0.0, 0.0] + [1.0] * 38
    cats = ["hard"] * 20 + ["easy"] * 60 + [""] * 40
    return np.array(p), np.array(weak), np.ones(120), cats


def test_cheapest_threshold_meeting_the_floor() -> None:
    p, weak, strong, cats = synthetic()
    result = calibrate(p, weak, strong, cats, floor=0.99, light_cost=0.1)
    assert [g.category for g in result.gates] == ["hard"]
    assert result.judged == 2
    chosen = result.chosen
    assert chosen is not None
    # gates alone: 118/120 = 0.983 < 0.99; adding the P=0.8 prompt: 119/120 = 0.9917
    assert chosen.threshold == pytest.approx(0.8)
    assert chosen.quality == pytest.approx(119 / 120) and chosen.quality >= 0.99
    assert chosen.heavy_share == pytest.approx(21 / 120)
    assert chosen.cost == pytest.approx(21 / 120 + (99 / 120) * 0.1)


def test_a_low_floor_needs_no_heavy_call_beyond_the_gates() -> None:
    p, weak, strong, cats = synthetic()
    chosen = calibrate(p, weak, strong, cats, floor=0.95, light_cost=0.1).chosen
    assert chosen is not None and chosen.threshold > 0.9
    assert chosen.heavy_share == pytest.approx(20 / 120)


def test_small_categories_are_not_judged() -> None:
    p, weak, strong, cats = synthetic()
    result = calibrate(p, weak, strong, cats, floor=0.99, light_cost=0.1, min_rows=50)
    assert result.judged == 1 and result.gates == ()
    assert result.chosen is not None and result.chosen.quality >= 0.99


def test_curve_is_monotone_in_heavy_share() -> None:
    p, weak, strong, cats = synthetic()
    curve = calibrate(p, weak, strong, cats, floor=0.99, light_cost=0.1).curve
    shares = [pt.heavy_share for pt in curve]
    assert shares == sorted(shares, reverse=True)


def test_rows_a_rule_decides_stay_where_the_rule_sends_them() -> None:
    """Through the rules: 10 light-failing prompts a rule sends light cost quality no threshold
    wins back, 10 the rule sends heavy cost heavy calls at any threshold."""
    p = np.array([0.9] * 10 + [0.1] * 10 + [0.8] * 10 + [0.3] * 70)
    weak = np.array([0.0] * 10 + [1.0] * 10 + [0.0] * 10 + [1.0] * 70)
    strong = np.ones(100)
    fixed: list[bool | None] = [False] * 10 + [True] * 10 + [None] * 80
    cats = [""] * 100
    result = calibrate(p, weak, strong, cats, floor=0.9, light_cost=0.1, fixed=fixed)
    chosen = result.chosen
    assert chosen is not None
    # the 10 rule-light failures stay: 0.9 only with the P=0.8 prompts heavy
    assert chosen.threshold == pytest.approx(0.8)
    assert chosen.quality == pytest.approx(0.9)
    assert chosen.heavy_share == pytest.approx(20 / 100)  # 10 by the rule + 10 by the threshold
    # a floor above what the rules allow: no threshold
    assert calibrate(p, weak, strong, cats, floor=0.95, light_cost=0.1, fixed=fixed).chosen is None
    # the curve's lowest threshold still leaves the rule-light rows light
    assert min(pt.heavy_share for pt in result.curve) == pytest.approx(0.1)
    assert max(pt.heavy_share for pt in result.curve) == pytest.approx(0.9)
