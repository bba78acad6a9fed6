from __future__ import annotations

import numpy as np

from hybrid_gateway.embedding.base import Matrix
from hybrid_gateway.review.cluster import _greedy, cluster


def unit(rows: list[list[float]]) -> Matrix:
    m = np.array(rows, dtype=np.float32)
    out: Matrix = (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)
    return out


TOPICS = unit([[1, 0.05, 0], [1, 0, 0.05], [0.98, 0.1, 0], [0, 1, 0.02], [0.03, 1, 0], [0, 0, 1]])


def test_groups_by_topic_largest_first() -> None:
    assert cluster(TOPICS, 0.9) == [[0, 1, 2], [3, 4], [5]]
    assert cluster(TOPICS, 0.999999) == [[0], [1], [2], [3], [4], [5]]
    assert cluster(TOPICS[:0], 0.9) == []


def test_deterministic_and_independent_of_input_order() -> None:
    rng = np.random.default_rng(7)
    base = unit(rng.normal(size=(40, 8)).tolist())
    first = cluster(base, 0.3)
    assert first == cluster(base, 0.3)
    order = rng.permutation(40)
    shuffled = cluster(base[order], 0.3)
    as_sets = {frozenset(int(order[i]) for i in g) for g in shuffled}
    assert as_sets == {frozenset(g) for g in first}


def test_greedy_pass_for_large_inputs_agrees_on_clear_topics() -> None:
    assert sorted(map(sorted, _greedy(TOPICS, 0.9))) == [[0, 1, 2], [3, 4], [5]]
