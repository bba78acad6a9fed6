"""`bench semantic`'s lookup case: the configured index against exact search, same vectors."""

from __future__ import annotations

import asyncio

import numpy as np

from hybrid_gateway.cache.semantic.bench import _lookup_case


def test_the_lookup_case_measures_the_prefilter_against_exact_search() -> None:
    rng = np.random.default_rng(7)
    small, large = (asyncio.run(_lookup_case(n, 40, rng, exact_up_to=1000, candidates=32))
                    for n in (500, 4000))  # fmt: skip
    assert (small["prefiltered"], large["prefiltered"]) == (False, True)
    assert small["near_recall_at_1"] == 1.0  # exact: always the nearest
    assert large["near_recall_at_1"] >= 0.95
    for case in (small, large):
        assert set(case["search"]) == set(case["exact_search"]) == {"p50_ms", "p99_ms"}
    assert large["index_bytes"] > large["vector_bytes"]  # matrix + ids + signatures
