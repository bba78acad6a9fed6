"""``PoolLoad``: the pool's running in-flight total and its count of full endpoints follow every
change (requests, slots retuned, a reload adding and removing endpoints), and a pick never
takes a full endpoint while another has a slot.  Manual clock, no network."""

from __future__ import annotations

import random
from typing import Any

from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.upstreams.pool.endpoint import Request
from hybrid_gateway.upstreams.pool.pool import EndpointPool
from hybrid_gateway.upstreams.pool.resize import prepare_resize
from tests.upstreams.pool.held import channel, held_pool, spec

BODY: Any = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def check(pool: EndpointPool) -> None:
    load = pool._load
    assert load.endpoints == len(pool.endpoints)
    assert load.in_flight == sum(e.in_flight for e in pool.endpoints)
    assert load.full == sum(not e.has_slot for e in pool.endpoints)


async def test_the_totals_follow_random_changes_and_reloads() -> None:
    rng = random.Random(5)
    names = [f"e{i}" for i in range(6)]
    up = held_pool(channel([spec(n, max_concurrency=4) for n in names[:4]]), ManualClock())
    for _ in range(400):
        endpoint = rng.choice(up.endpoints)
        move = rng.random()
        if move < 0.6:
            endpoint.in_flight = rng.randrange(0, 7)
        elif move < 0.8:
            endpoint.retune(endpoint.weight, rng.randrange(1, 6))
        elif move < 0.9:
            kept = rng.sample(names, rng.randrange(1, len(names) + 1))
            prepare_resize(up, channel([spec(n, max_concurrency=4) for n in kept])).apply()
        else:  # a retired endpoint's requests finishing do not count in its old pool
            for retired in up.draining:
                retired.in_flight = max(0, retired.in_flight - 1)
        check(up)
    await up.aclose()


async def test_a_pick_passes_over_full_endpoints_and_takes_one_when_all_are_full() -> None:
    up = held_pool(channel([spec("e0", max_concurrency=2), spec("e1", max_concurrency=2)]),
                   ManualClock())  # fmt: skip
    e0, e1 = up.endpoints
    e0.in_flight = 2
    assert {up.pick(Request(BODY), set())[0].name for _ in range(6)} == {"e1"}
    e0.max_concurrency = 3  # a slot again
    assert {up.pick(Request(BODY), set())[0].name for _ in range(6)} == {"e0", "e1"}
    e1.in_flight = 2
    e0.in_flight = 3
    assert up._load.full == 2  # all full: the pick still answers (the client's slots queue)
    assert up.pick(Request(BODY), set())[0] in (e0, e1)
    await up.aclose()
