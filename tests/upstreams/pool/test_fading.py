"""A dropped generation is freed a few entries per call, and never grows without bound."""

from __future__ import annotations

import copy

from hybrid_gateway.upstreams.pool.chain import ChainMemo
from hybrid_gateway.upstreams.pool.fading import Fading
from tests.upstreams.pool.helpers import conversation


def test_step_frees_the_oldest_dropped_entries_first() -> None:
    fading = Fading()
    first, second = {i: i for i in range(5)}, {i: i for i in range(3)}
    fading.drop(first)
    fading.drop(second)
    fading.drop({})  # nothing to free: not kept
    assert len(fading) == 8
    fading.step(4)
    assert len(first) == 1 and len(second) == 3
    fading.step(3)  # the rest of the first, then the second
    assert not first and len(second) == 1
    fading.step(10)
    assert len(fading) == 0 and not second
    fading.step(1)  # nothing left: nothing happens


def test_a_third_dropped_dict_frees_the_oldest_at_once() -> None:
    fading = Fading()
    dicts = [{i: i for i in range(4)} for _ in range(3)]
    for d in dicts:
        fading.drop(d)
    assert len(fading) == 8  # the first one was let go whole (its entries are not stepped)
    fading.step(8)
    assert len(fading) == 0 and not dicts[1] and not dicts[2]


def test_the_memo_frees_its_dropped_generations_while_it_keeps_new_ones() -> None:
    memo = ChainMemo(32, 20_000)
    most = 0
    for i in range(400):
        memo.chain(copy.deepcopy(conversation(f"system prompt {i % 7} " * 20, f"question {i}")))
        most = max(most, len(memo._fading))
    # each generation holds about the entries kept while the next one fills: it is gone before
    # the next drop, so what waits to be freed never exceeds one generation
    assert 0 < most <= len(memo._young) + len(memo._old)
    assert len(memo._fading._dicts) <= 1
