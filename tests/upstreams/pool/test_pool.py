"""The pool against real loopback servers: failover, ejection, retries elsewhere, streams."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest

from hybrid_gateway.config import ChannelConfig
from hybrid_gateway.errors import UpstreamUnavailable
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.resilience.dispatch import Dispatcher, DispatchParts, LaneChannels
from hybrid_gateway.resilience.retry import RetryBudget, RetryPolicy
from hybrid_gateway.types import RequestRecord, RouteDecision
from hybrid_gateway.upstreams.pool.build import build_pool
from hybrid_gateway.upstreams.pool.pool import EndpointPool
from hybrid_gateway.upstreams.pool.resize import prepare_resize
from tests.e2e.stack import closed_port
from tests.upstreams.pool.fakes import Replica, replicas

BODY: Any = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


class Events:
    def __init__(self) -> None:
        self.states: list[tuple[str, str]] = []
        self.results: list[tuple[str, str]] = []
        self.resumes: list[tuple[str, str]] = []

    def endpoint_state(self, channel: str, endpoint: str, state: str) -> None:
        self.states.append((endpoint, state))

    def endpoint_load(self, channel: str, endpoint: str, in_flight: int) -> None:
        pass

    def endpoint_result(self, channel: str, endpoint: str, outcome: str) -> None:
        self.results.append((endpoint, outcome))

    def endpoint_removed(self, channel: str, endpoint: str) -> None:
        self.states.append((endpoint, "removed"))

    def stream_resume(self, channel: str, endpoint: str, outcome: str) -> None:
        self.resumes.append((endpoint, outcome))


def pool(urls: list[str], clock: ManualClock, events: Events | None = None,
         **balancing: Any) -> EndpointPool:  # fmt: skip
    config = ChannelConfig.model_validate({
        "model": "m", "connect_timeout_s": 1, "timeout_s": 5,
        "endpoints": [{"url": url, "name": f"e{i}"} for i, url in enumerate(urls)],
        "balancing": {"policy": "round_robin", **balancing},
        "health": {"consecutive_failures": 2, "base_ejection_s": 1.0},
    })  # fmt: skip
    return build_pool("c", config, api_key=None, ca_file=None, clock=clock,
                      listeners=[events] if events else [], rng=random.Random(1))  # fmt: skip


def dispatcher(upstream: EndpointPool, clock: ManualClock) -> Dispatcher:
    return Dispatcher(DispatchParts(
        lanes={"heavy": LaneChannels(upstream)}, clock=clock,
        budget=RetryBudget(clock, ratio=1.0, min_per_s=100.0),
        policy=RetryPolicy(random.Random(1), backoff_s=(0.0, 0.0), jitter=0.0),
    ))  # fmt: skip


async def wait_for(condition: Callable[[], bool]) -> None:
    """Until the checker's real HTTP round trip is done (the interval is on the manual clock)."""
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def record() -> RequestRecord:
    rec = RequestRecord(request_id="req_1", started_at=0.0)
    rec.route = RouteDecision("heavy", "c", "test")
    return rec


async def test_a_refused_endpoint_is_skipped_at_once_then_ejected() -> None:
    clock, events = ManualClock(), Events()
    async with replicas(2) as (a, b):
        up = pool([a.url, f"http://127.0.0.1:{closed_port()}/v1", b.url], clock, events)
        for _ in range(6):
            _, answer = await up.complete(BODY)
            assert answer["choices"][0]["message"]["content"] == "ok"
        assert ("e1", "ejected") in events.states
        assert a.chats + b.chats == 6
        assert [s.state for s in up.status()] == ["healthy", "ejected", "healthy"]
        await up.aclose()


async def test_a_retry_goes_to_another_endpoint_and_the_route_names_the_one_that_answered() -> None:
    clock = ManualClock()
    async with replicas(2) as (a, b):
        a.mode = "status=502"
        up = pool([a.url, b.url], clock)
        rec = record()
        await dispatcher(up, clock).complete(rec, BODY)
        assert rec.retries == 1 and a.chats == 1 and b.chats == 1
        assert rec.route is not None
        assert rec.route.header() == (
            "lane=heavy; channel=c; rule=test; endpoint=e1; policy=round_robin"
        )
        await up.aclose()


async def test_with_every_endpoint_out_the_pool_fails_like_one_unreachable_channel() -> None:
    clock = ManualClock()
    up = pool([f"http://127.0.0.1:{closed_port()}/v1" for _ in range(2)], clock)
    with pytest.raises(UpstreamUnavailable) as first:
        await up.complete(BODY)  # tries both (nothing was sent), then gives up
    assert first.value.code == "upstream_connection_error"
    with pytest.raises(UpstreamUnavailable):
        await up.complete(BODY)
    with pytest.raises(UpstreamUnavailable) as out:
        await up.complete(BODY)
    assert out.value.code == "upstream_connection_error"
    assert "all 2 endpoints are ejected (next probe in 1.0 s)" in str(out.value)
    await up.aclose()


async def test_an_ejected_endpoint_gets_one_probe_when_its_time_is_up_and_comes_back() -> None:
    clock, events = ManualClock(), Events()
    async with replicas(2) as (a, b):
        a.mode = "status=503"
        up = pool([a.url, b.url], clock, events)
        for _ in range(4):
            rec = record()
            await dispatcher(up, clock).complete(rec, BODY)
        assert ("e0", "ejected") in events.states and a.chats == 2
        for _ in range(3):  # ejected: nothing goes there
            await up.complete(BODY)
        assert a.chats == 2
        a.mode = "ok"
        await clock.advance(1.0)
        for _ in range(4):
            await up.complete(BODY)
        assert a.chats == 4  # the probe, then its round-robin share
        assert events.states[-2:] == [("e0", "probing"), ("e0", "healthy")]
        await up.aclose()


async def test_streams_count_in_flight_and_a_cut_stream_counts_against_its_endpoint() -> None:
    clock, events = ManualClock(), Events()
    async with replicas(2) as (a, b):
        b.mode = "cut"
        up = pool([a.url, b.url], clock, events)
        stream_body = {**BODY, "stream": True}
        async with up.open_stream(stream_body) as payloads:
            assert up.endpoints[0].in_flight == 1
            assert [p async for p in payloads][-1].strip() == b"[DONE]"
        assert up.endpoints[0].in_flight == 0
        with pytest.raises(UpstreamUnavailable):
            async with up.open_stream(stream_body) as payloads:
                async for _ in payloads:
                    pass
        assert up.endpoints[1].in_flight == 0
        assert ("e1", "failure") in events.results
        await up.aclose()


async def test_session_header_keeps_a_session_on_one_endpoint() -> None:
    clock = ManualClock()
    async with replicas(3) as servers:
        up = pool([s.url for s in servers], clock, policy="session", session_header="x-session")
        homes = set()
        for _ in range(5):
            rec = record()
            rec.extra["request_headers"] = {"x-session": "abc"}
            await dispatcher(up, clock).complete(rec, BODY)
            assert rec.route is not None and rec.route.endpoint is not None
            homes.add(rec.route.endpoint.endpoint)
        assert len(homes) == 1
        assert sorted(s.chats for s in servers) == [0, 0, 5]
        await up.aclose()


async def test_active_checks_eject_a_failing_endpoint_and_take_it_back() -> None:
    clock = ManualClock()
    async with replicas(2) as (a, b):
        config = ChannelConfig.model_validate({
            "model": "m",
            "endpoints": [{"url": a.url, "name": "a"}, {"url": b.url, "name": "b"}],
            "health": {"consecutive_failures": 1,
                       "active": {"path": "/health", "interval_s": 2.0}},
        })  # fmt: skip
        up = build_pool("c", config, api_key=None, ca_file=None, clock=clock, listeners=[],
                        rng=random.Random(1))  # fmt: skip
        await up.complete(BODY)  # starts the checks
        await wait_for(lambda: a.checks == 1 and clock.sleepers == 1)
        a.mode = "status=503"
        await clock.advance(2.0)
        await wait_for(lambda: up.status()[0].state == "ejected" and clock.sleepers == 1)
        a.mode = "ok"
        await clock.advance(2.0)
        await wait_for(lambda: up.status()[0].state == "healthy")
        assert a.checks == 3
        await up.aclose()


async def test_active_checks_follow_a_reload_of_the_endpoints() -> None:
    clock = ManualClock()
    async with replicas(2) as (a, b):

        def config(*servers: tuple[str, Replica]) -> ChannelConfig:
            return ChannelConfig.model_validate({
                "model": "m", "endpoints": [{"url": s.url, "name": n} for n, s in servers],
                "health": {"active": {"path": "/health", "interval_s": 2.0}},
            })  # fmt: skip

        up = build_pool("c", config(("a", a)), api_key=None, ca_file=None, clock=clock,
                        listeners=[], rng=random.Random(1))  # fmt: skip
        await up.complete(BODY)  # starts the checks
        await wait_for(lambda: a.checks == 1 and clock.sleepers == 1)
        prepare_resize(up, config(("b", b))).apply()  # a removed, b added
        await clock.advance(2.0)
        await wait_for(lambda: b.checks == 1 and clock.sleepers == 1)
        assert a.checks == 1  # the removed endpoint is no longer checked
        await up.aclose()
