"""Property: over any sequence of requests, answers, ejections and reloads that add, remove and
reweight endpoints, no request is sent to an endpoint a reload removed (nor to an ejected one),
every request in flight on a removed endpoint completes, each removed endpoint's client closes
once its requests are done, and prefix_affinity's memory names only endpoints in service."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid_gateway.errors import UpstreamUnavailable
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.upstreams.pool.endpoint import Endpoint
from hybrid_gateway.upstreams.pool.pool import EndpointPool
from hybrid_gateway.upstreams.pool.prefix import PrefixAffinity
from hybrid_gateway.upstreams.pool.resize import prepare_resize
from tests.upstreams.pool.held import channel, held, held_pool, spec
from tests.upstreams.pool.helpers import conversation

NAMES = [f"e{i}" for i in range(8)]
SYSTEMS = ["You answer questions about trains. " * 6, "You write SQL for analysts. " * 6]

op = st.one_of(
    st.tuples(st.just("send"), st.integers(0, 1), st.integers(0, 3)),  # system, turns
    st.tuples(st.just("answer"), st.integers(0, 7), st.integers(1, 3)),  # endpoint, how many
    st.tuples(st.just("eject"), st.integers(0, 7), st.just(0)),
    st.tuples(st.just("restore"), st.integers(0, 7), st.just(0)),
    st.tuples(st.just("reload"), st.sets(st.integers(0, 7), min_size=1), st.integers(1, 3)),
)


def config(members: list[int], weight: int, policy: str) -> Any:
    endpoints = [spec(NAMES[i], weight=float(1 + (i * weight) % 3)) for i in sorted(members)]
    return channel(endpoints, policy=policy, block_chars=32, max_blocks=256)


def check_prefix_memory(pool: EndpointPool) -> None:
    policy = pool.policy
    if isinstance(policy, PrefixAffinity):
        n = len(pool.endpoints)
        masks = [*policy._young.values(), *policy._old.values()]
        assert all(mask >> n == 0 for mask in masks)  # no bit of a removed endpoint
        assert policy.blocks <= 256


async def run(policy: str, start: set[int], ops: list[tuple[str, Any, int]]) -> None:
    clock = ManualClock()
    pool = held_pool(config(sorted(start), 1, policy), clock)
    every: dict[str, list[Endpoint]] = {}  # each endpoint object ever in the pool
    tasks: list[asyncio.Task[Any]] = []
    removed: list[Endpoint] = []

    def note() -> None:
        for e in pool.endpoints:
            if all(e is not seen for seen in every.setdefault(e.name, [])):
                every[e.name].append(e)

    note()
    for kind, a, b in ops:
        if kind == "send":
            turns = [f"turn {t} " * 5 for t in range(b + 1)]
            tasks.append(asyncio.create_task(pool.complete(conversation(SYSTEMS[a], *turns))))
            await asyncio.sleep(0)  # it picks now: Held checks the endpoint is in service
        elif kind == "answer":
            for endpoint in every.get(NAMES[a], []):
                held(endpoint).release(b)
            await asyncio.sleep(0)
        elif kind in ("eject", "restore"):
            for endpoint in pool.endpoints:
                if endpoint.name == NAMES[a]:
                    (endpoint.health.failure if kind == "eject" else endpoint.health.check_passed)()
        else:
            removed += prepare_resize(pool, config(sorted(a), b, policy)).apply()
            note()
            assert all(e.retired and e not in pool.endpoints for e in removed)
        check_prefix_memory(pool)
    for endpoints in every.values():
        for endpoint in endpoints:
            held(endpoint).release()
    for task in tasks:
        try:
            _, answer = await task
            assert answer["choices"][0]["message"]["content"] == "ok"
        except UpstreamUnavailable:  # every endpoint ejected when it was sent: nothing sent
            pass
    await asyncio.sleep(0)
    assert pool.draining == []
    assert all(held(e).closed and e.in_flight == 0 for e in removed)
    assert not any(held(e).closed for e in pool.endpoints)


@settings(max_examples=120, deadline=None)
@given(
    policy=st.sampled_from(["prefix_affinity", "least_outstanding", "round_robin", "session"]),
    start=st.sets(st.integers(0, 7), min_size=1, max_size=5),
    ops=st.lists(op, min_size=1, max_size=40),
)
def test_reloads_never_send_to_a_removed_endpoint_and_lose_no_request(
    policy: str, start: set[int], ops: list[tuple[str, Any, int]]
) -> None:
    asyncio.run(run(policy, start, ops))
