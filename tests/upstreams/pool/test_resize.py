"""A reload that changes a pool's endpoints in place (upstreams/pool/resize.py): kept endpoints
keep their state, new ones start healthy, removed ones take no new request and drain; the
policies' state follows the endpoints it was about.  Manual clock, no network."""

from __future__ import annotations

import asyncio
from typing import Any

from hybrid_gateway.observability.metrics import GatewayMetrics
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.upstreams.pool.endpoint import Request
from hybrid_gateway.upstreams.pool.health import HealthState
from hybrid_gateway.upstreams.pool.pool import EndpointPool
from hybrid_gateway.upstreams.pool.prefix import PrefixAffinity
from hybrid_gateway.upstreams.pool.report import endpoint_report
from hybrid_gateway.upstreams.pool.resize import EndpointChanges, prepare_resize
from tests.upstreams.pool.held import channel, held, held_pool, spec
from tests.upstreams.pool.helpers import conversation

BODY: Any = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def names(pool: EndpointPool, n: int, body: Any = BODY) -> list[str]:
    return [pool.pick(Request(body), set())[0].name for _ in range(n)]


async def test_an_added_endpoint_takes_picks_and_the_kept_ones_keep_their_state() -> None:
    clock = ManualClock()
    up = held_pool(channel([spec("e0"), spec("e1")]), clock)
    e0, e1 = up.endpoints
    e0.observe_latency(0.25)
    e0.requests = 7
    e1.health.failure()  # threshold 1: ejected
    assert names(up, 4) == ["e0"] * 4

    resize = prepare_resize(up, channel([spec("e0"), spec("e1"), spec("e2")]))
    assert up.endpoints == (e0, e1)  # prepared: nothing applied yet
    assert resize.changes == EndpointChanges("c", added=("e2",))
    assert resize.apply() == []
    assert up.endpoints[:2] == (e0, e1) and [e.index for e in up.endpoints] == [0, 1, 2]
    assert (e0.ewma_s, e0.requests, e1.health.state) == (0.25, 7, HealthState.EJECTED)
    e2 = next(e for e in up.endpoints if e.name == "e2")
    assert e2.health.state is HealthState.HEALTHY and e2.ewma_s == 0.0
    assert sorted(set(names(up, 6))) == ["e0", "e2"]  # e1 stays ejected
    await clock.advance(1.0)  # e1's probe is due, as it would have been without the reload
    picks = [up.pick(Request(BODY), set()) for _ in range(3)]
    assert ("e1", True) in [(endpoint.name, probe) for endpoint, probe in picks]
    await up.aclose()


async def test_weight_and_slots_change_in_place() -> None:
    clock = ManualClock()
    up = held_pool(channel([spec("e0"), spec("e1")]), clock)
    e0, e1 = up.endpoints
    e0.in_flight = 2
    resize = prepare_resize(up, channel([spec("e0", weight=3.0, max_concurrency=8), spec("e1")]))
    assert resize.changes.retuned == ("e0: weight 1 -> 3, max_concurrency 64 -> 8",)
    resize.apply()
    assert up.endpoints == (e0, e1)
    assert (e0.weight, e0.load, e0.max_concurrency, held(e0).slots) == (3.0, 2 / 3, 8, 8)
    e0.in_flight = 0
    assert sorted(names(up, 8)) == ["e0"] * 6 + ["e1"] * 2  # smooth weighted round robin


async def test_a_removed_endpoint_gets_no_new_request_and_its_request_in_flight_completes() -> None:
    clock, metrics = ManualClock(), GatewayMetrics()
    up = held_pool(channel([spec("e0"), spec("e1")]), clock, [metrics])
    e0, e1 = up.endpoints
    first = asyncio.create_task(up.complete(BODY))  # round robin: e0
    await asyncio.sleep(0)
    assert e0.in_flight == 1 and held(e0).sent == 1

    removed = prepare_resize(up, channel([spec("e1"), spec("e2")])).apply()
    assert removed == [e0] and e0.retired and up.draining == [e0]
    assert [e.name for e in up.endpoints] == ["e1", "e2"] and e1.index == 0
    statuses = {s.name: s.state for s in up.status()}
    assert statuses == {"e1": "healthy", "e2": "healthy", "e0": "draining"}
    pools, problems = endpoint_report({"c": up})
    assert [p["name"] for p in pools["c"]] == ["e1", "e2", "e0"] and problems == []
    text = metrics.render().decode()
    assert 'endpoint="e0"' not in text and 'endpoint="e2"' in text

    others = [asyncio.create_task(up.complete(BODY)) for _ in range(6)]
    await asyncio.sleep(0)
    assert held(e0).sent == 1  # nothing new: the 6 went to e1 and e2 (Held checks each)
    assert held(up.endpoints[0]).sent + held(up.endpoints[1]).sent == 6

    assert held(e0).release() == 1
    _, answer = await first
    assert answer["choices"][0]["message"]["content"] == "ok"  # the request in flight finished
    await asyncio.sleep(0)  # its client closes once it has no request left
    assert held(e0).closed and up.draining == [] and e0.in_flight == 0
    assert 'endpoint="e0"' not in metrics.render().decode()  # not brought back by its end
    for endpoint in up.endpoints:
        held(endpoint).release()
    await asyncio.gather(*others)
    await up.aclose()


async def test_a_removed_idle_endpoint_closes_at_once_and_a_new_url_is_a_new_endpoint() -> None:
    clock, metrics = ManualClock(), GatewayMetrics()
    up = held_pool(channel([spec("e0"), spec("e1")]), clock, [metrics])
    e0, e1 = up.endpoints
    moved = {**spec("e1"), "url": "http://127.0.0.1:9100/v1"}  # same name, another server
    resize = prepare_resize(up, channel([spec("e0"), moved]))
    assert resize.changes == EndpointChanges("c", added=("e1",), removed=("e1",))
    resize.apply()
    await asyncio.sleep(0)
    assert held(e1).closed and up.draining == []
    assert up.endpoints[0] is e0 and up.endpoints[1] is not e1
    assert up.endpoints[1].url == "http://127.0.0.1:9100/v1"
    assert metrics.endpoint_up.values[("c", "e1")] == 1  # the new one's series, not dropped


async def test_ejection_bookkeeping_follows_the_new_indexes() -> None:
    clock = ManualClock()
    up = held_pool(channel([spec("e0"), spec("e1"), spec("e2")]), clock)
    e0, _, e2 = up.endpoints
    e2.health.failure()  # ejected at index 2
    prepare_resize(up, channel([spec("e2"), spec("e1")])).apply()  # e2 now index 0
    assert set(names(up, 4)) == {"e1"}
    e0.health.failure()  # retired: its state changes touch nothing of the pool
    e0.health.check_passed()
    assert set(names(up, 4)) == {"e1"}
    e2.health.check_passed()
    assert set(names(up, 4)) == {"e1", "e2"}


def turn(system: str, n: int) -> dict[str, Any]:
    return conversation(system, *[f"question {i} " * 12 for i in range(n)])


async def test_prefix_affinity_memory_follows_kept_endpoints_and_drops_removed_ones() -> None:
    clock = ManualClock()
    config = channel([spec("e0"), spec("e1"), spec("e2")], policy="prefix_affinity",
                     block_chars=32)  # fmt: skip
    up = held_pool(config, clock)
    policy = up.policy
    assert isinstance(policy, PrefixAffinity)
    systems = [f"system prompt {k} " * 10 for k in range(3)]
    home = {s: names(up, 1, turn(s, 1))[0] for s in systems}  # one conversation per endpoint
    assert sorted(home.values()) == ["e0", "e1", "e2"]
    blocks = policy.blocks
    gone = next(s for s in systems if home[s] == "e0")
    prepare_resize(up, channel([spec("e2"), spec("e1")], policy="prefix_affinity",
                               block_chars=32)).apply()  # fmt: skip
    assert up.policy is policy and policy.blocks < blocks  # e0's own blocks dropped
    for system in systems:
        if system != gone:  # the next turn still goes where its prefix is
            assert names(up, 1, turn(system, 2)) == [home[system]]
    assert names(up, 1, turn(gone, 2))[0] in ("e1", "e2")

    # knobs other than policy/block_chars: the same policy, its memory kept
    retuned = prepare_resize(up, channel([spec("e2"), spec("e1")], policy="prefix_affinity",
                                         block_chars=32, match_threshold=0.5))  # fmt: skip
    assert retuned.changes.balancing == "knobs"
    retuned.apply()
    assert up.policy is policy and policy._threshold == 0.5
    # a new block size: a new policy, which knows nothing yet
    fresh = prepare_resize(up, channel([spec("e2"), spec("e1")], policy="prefix_affinity",
                                       block_chars=64))  # fmt: skip
    assert fresh.changes.balancing == "new prefix_affinity"
    fresh.apply()
    assert isinstance(up.policy, PrefixAffinity) and up.policy is not policy
    assert up.policy.blocks == 0


async def test_prefix_affinity_memory_stays_bounded_when_max_blocks_shrinks() -> None:
    clock = ManualClock()
    config = channel([spec("e0"), spec("e1")], policy="prefix_affinity", block_chars=16,
                     max_blocks=4096)  # fmt: skip
    up = held_pool(config, clock)
    for k in range(60):
        names(up, 1, turn(f"system {k} " * 20, 3))
    assert up.policy.blocks > 128  # type: ignore[attr-defined]
    prepare_resize(up, channel([spec("e0"), spec("e1")], policy="prefix_affinity",
                               block_chars=16, max_blocks=128)).apply()  # fmt: skip
    assert up.policy.blocks <= 128  # type: ignore[attr-defined]


async def test_session_keys_stay_home_unless_their_endpoint_is_removed() -> None:
    clock = ManualClock()
    up = held_pool(channel([spec("e0"), spec("e1"), spec("e2")], policy="session"), clock)
    keys = [f"user-{k}" for k in range(200)]

    def homes() -> dict[str, str]:
        return {k: up.pick(Request(BODY, session=k), set())[0].name for k in keys}

    before = homes()
    prepare_resize(up, channel([spec("e1"), spec("e2"), spec("e3")], policy="session")).apply()
    after = homes()
    stayed = [k for k in keys if before[k] != "e0"]
    moved = [k for k in stayed if after[k] != before[k]]
    assert all(after[k] == "e3" for k in moved)  # only to the new endpoint's ring points
    assert len(moved) < len(stayed) / 2
    assert all(after[k] in ("e1", "e2", "e3") for k in keys if before[k] == "e0")
