from __future__ import annotations

import numpy as np
import pytest

from hybrid_gateway.routing.evaluation import (
    NoGapError,
    gain_curve,
    random_quality,
    router_quality,
)

WEAK = np.array([0.0, 1.0, 0.0, 1.0])
STRONG = np.array([1.0, 1.0, 1.0, 0.0])  # gains per prompt: 1, 0, 1, -1 (total 1)


def test_oracle_by_hand() -> None:
    q = router_quality(np.array([1.0, 0.0, 1.0, -1.0]), WEAK, STRONG)
    # gain(k) = 0, 1, 2, 2, 1; PGR at 0..100 % interpolates it (k = 4 x share).
    expected = [0, 0.4, 0.8, 1.2, 1.6, 2.0, 2.0, 2.0, 1.8, 1.4, 1.0]
    assert q.pgr == pytest.approx(expected)
    assert q.apgr == pytest.approx(1.37)  # 0.1 x (sum - (first + last) / 2)
    assert q.cpt50 == pytest.approx(0.125)  # half of the first strong call
    assert q.cpt80 == pytest.approx(0.2)
    assert q.n == 4


def test_worst_ranking_by_hand() -> None:
    q = router_quality(np.array([-1.0, 0.0, -1.0, 1.0]), WEAK, STRONG)
    assert list(gain_curve(np.array([-1.0, 0.0, -1.0, 1.0]), WEAK, STRONG)) == [0, -1, -1, 0, 1]
    assert q.cpt50 == pytest.approx(0.875)


def test_ties_are_split_evenly_so_a_constant_router_is_random() -> None:
    q = router_quality(np.zeros(4), WEAK, STRONG)
    assert q.apgr == pytest.approx(0.5)
    assert q.pgr == pytest.approx(list(np.linspace(0, 1, 11)))
    assert q.cpt50 == pytest.approx(0.5) and q.cpt80 == pytest.approx(0.8)


def test_random_router_is_about_one_half() -> None:
    rng = np.random.default_rng(3)
    weak = (rng.random(4000) < 0.6).astype(float)
    strong = np.maximum(weak, (rng.random(4000) < 0.5).astype(float))
    q = random_quality(weak, strong)
    assert q.apgr == pytest.approx(0.5, abs=0.02)
    assert q.cpt50 == pytest.approx(0.5, abs=0.03)


def test_graded_scores_by_hand() -> None:
    # Judge scores 1-10: only the first prompt gains (7 points) from the strong model.
    q = router_quality(np.array([1.0, 0.0]), np.array([2.0, 8.0]), np.array([9.0, 8.0]))
    assert q.apgr == pytest.approx(0.75)
    assert q.cpt50 == pytest.approx(0.25)


def test_no_gap_is_an_error() -> None:
    with pytest.raises(NoGapError):
        router_quality(np.zeros(2), np.array([1.0, 1.0]), np.array([1.0, 0.0]))
