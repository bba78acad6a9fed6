"""No single caller can open a breaker: suspect failures count across callers or known shapes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from hybrid_gateway.errors import (
    GatewayError,
    InvalidRequest,
    Overloaded,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from hybrid_gateway.resilience.breaker import (
    BreakerSettings,
    BreakerState,
    Caller,
    CircuitBreaker,
    Outcome,
)
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.resilience.dispatch import Dispatcher, DispatchParts, LaneChannels, _outcome
from hybrid_gateway.resilience.retry import RetryBudget
from hybrid_gateway.resilience.shape import request_shape
from hybrid_gateway.types import RequestRecord, RouteDecision
from hybrid_gateway.upstreams.openai_http import UpstreamRejected
from hybrid_gateway.upstreams.profiles import UnsupportedByUpstream

GOOD = request_shape({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
BAD = request_shape({"model": "m", "messages": [{"role": "user", "content": [
    {"type": "text", "text": "hi"}]}]})  # fmt: skip


def make(min_callers: int = 2) -> tuple[CircuitBreaker, ManualClock]:
    clock = ManualClock(start=1000.0)
    settings = BreakerSettings(min_requests=20, error_rate=0.2, min_distinct_callers=min_callers)
    return CircuitBreaker("llama", clock, settings), clock


def send(breaker: CircuitBreaker, outcome: Outcome, caller: Caller) -> None:
    admission = breaker.allow()
    if admission is not None:
        breaker.record(outcome, admission, caller)


def state(breaker: CircuitBreaker) -> BreakerState:
    return breaker.state


@pytest.mark.parametrize("per_second", [1, 10, 1000])
async def test_one_tenant_sending_bad_requests_at_any_rate_never_opens_it(per_second: int) -> None:
    breaker, clock = make()
    mallory, alice = Caller("acme/bot", BAD), Caller("alice/app", GOOD)
    for _ in range(120):  # two minutes, four windows
        for _ in range(per_second):
            send(breaker, Outcome.SUSPECT, mallory)
        send(breaker, Outcome.SUCCESS, alice)
        await clock.advance(1.0)
        assert state(breaker) is BreakerState.CLOSED
    assert breaker.allow() is not None  # alice is still served


def test_bad_requests_from_two_callers_open_it() -> None:
    breaker, _ = make()
    for i in range(20):
        send(breaker, Outcome.SUSPECT, Caller(f"tenant-{i % 2}/app", BAD))
    assert state(breaker) is BreakerState.OPEN


def test_uncounted_bad_requests_do_not_dilute_real_failures() -> None:
    breaker, _ = make()
    for _ in range(500):  # one tenant's noise: neither failures nor requests
        send(breaker, Outcome.SUSPECT, Caller("acme/bot", BAD))
    for _ in range(16):
        send(breaker, Outcome.SUCCESS, Caller("alice/app", GOOD))
    for _ in range(4):  # timeouts: 4 of 20 counted requests = 20 %
        send(breaker, Outcome.FAILURE, Caller("alice/app", GOOD))
    assert state(breaker) is BreakerState.OPEN


def test_the_server_failing_a_shape_it_answered_before_opens_it_for_one_caller() -> None:
    breaker, _ = make()
    only = Caller("default/default", GOOD)
    send(breaker, Outcome.SUCCESS, only)  # answered once
    for _ in range(19):
        send(breaker, Outcome.SUSPECT, only)  # the same kind of request now gets 500s
    assert state(breaker) is BreakerState.OPEN


def test_health_failures_from_one_caller_always_count() -> None:
    breaker, _ = make()
    for _ in range(20):
        send(breaker, Outcome.FAILURE, Caller("default/default", BAD))
    assert state(breaker) is BreakerState.OPEN


def test_min_distinct_callers_1_counts_every_failure() -> None:
    breaker, _ = make(min_callers=1)
    for _ in range(20):
        send(breaker, Outcome.SUSPECT, Caller("acme/bot", BAD))
    assert state(breaker) is BreakerState.OPEN


async def test_suspect_callers_leave_the_window_with_time() -> None:
    breaker, clock = make()
    for _ in range(15):
        send(breaker, Outcome.SUSPECT, Caller("acme/bot", BAD))
    await clock.advance(31.0)  # the first caller's failures are out of the 30 s window
    for _ in range(15):
        send(breaker, Outcome.SUSPECT, Caller("other/bot", BAD))
    assert state(breaker) is BreakerState.CLOSED


async def test_a_probe_with_a_suspect_failure_frees_its_slot_and_decides_nothing() -> None:
    breaker, clock = make()
    for _ in range(20):
        send(breaker, Outcome.FAILURE, Caller("a/a", GOOD))
    await clock.advance(31.0)
    assert state(breaker) is BreakerState.HALF_OPEN
    probe = breaker.allow()
    assert probe is not None and probe.probe
    breaker.record(Outcome.SUSPECT, probe, Caller("acme/bot", BAD))
    assert state(breaker) is BreakerState.HALF_OPEN
    again = breaker.allow()
    assert again is not None  # the slot was freed
    breaker.record(Outcome.SUCCESS, again, Caller("a/a", GOOD))
    assert state(breaker) is BreakerState.CLOSED


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (UpstreamUnavailable("500", channel="c", code="upstream_status_500"), Outcome.SUSPECT),
        (UpstreamUnavailable("501", channel="c", code="upstream_status_501"), Outcome.SUSPECT),
        (UpstreamUnavailable("502", channel="c", code="upstream_status_502"), Outcome.FAILURE),
        (UpstreamUnavailable("503", channel="c", code="upstream_status_503"), Outcome.FAILURE),
        (UpstreamUnavailable("x", channel="c", code="upstream_connection_error"), Outcome.FAILURE),
        (UpstreamUnavailable("x", channel="c", code="upstream_stream_broken"), Outcome.FAILURE),
        (UpstreamTimeout("x", channel="c"), Outcome.FAILURE),
        (Overloaded("429", retry_after_s=1, code="upstream_rate_limited"), Outcome.FAILURE),
        (Overloaded("full", retry_after_s=1), Outcome.IGNORED),
        (UpstreamRejected("400 or a validation 500"), Outcome.IGNORED),
        (UnsupportedByUpstream("n with stream"), Outcome.IGNORED),
        (InvalidRequest("too large for the context"), Outcome.IGNORED),
    ],
)  # fmt: skip
def test_failure_classification(error: GatewayError, outcome: Outcome) -> None:
    assert _outcome(error) is outcome


def test_shapes_ignore_content_and_length_but_not_structure() -> None:
    def shape(*messages: Any, **params: Any) -> int:
        return request_shape({"model": "m", "messages": list(messages), **params})

    user = {"role": "user", "content": "hi"}
    assert shape(user) == shape({"role": "user", "content": "something else"}, user)
    assert shape(user) != shape(user, temperature=0.5)
    assert shape(user) != shape({"role": "user", "content": [{"type": "text", "text": "hi"}]})
    assert shape(user) != shape(user, {"role": "tool", "content": "42"})
    # a plain {role, content} message takes a short way to its kind: the same as the long way
    assert shape(user) == shape({"role": "user", "content": "hi", "name": None})
    assert shape(user) != shape({"role": "user", "content": "hi", "name": "bob"})
    assert shape({"content": "hi", "name": "bob"}) != shape({"content": "hi"})
    # the hash is stable across processes and versions (breakers of replicas compare them)
    assert shape(user, max_tokens=64) == 12401242796833246777


class ShapeJudge:
    """A channel that answers 500 (no validation shape) to list content, else a completion."""

    name = "llama"

    async def complete(self, body: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]]:
        if any(isinstance(m.get("content"), list) for m in body["messages"]):
            raise UpstreamUnavailable("500 boom", channel=self.name, code="upstream_status_500")
        return b"{}", {"choices": []}

    def open_stream(self, body: Mapping[str, Any]) -> Any:
        raise NotImplementedError


async def test_through_the_dispatcher_one_tenants_500s_leave_the_others_served() -> None:
    clock = ManualClock(start=1000.0)
    settings = BreakerSettings(min_requests=5, error_rate=0.2)
    breaker = CircuitBreaker("llama", clock, settings)
    channel = ShapeJudge()
    dispatcher = Dispatcher(
        DispatchParts(lanes={"light": LaneChannels(channel)}, clock=clock,
                      budget=RetryBudget(clock, ratio=0.1, min_per_s=1.0),
                      breakers={"llama": breaker})
    )  # fmt: skip

    def request(tenant: str, content: Any) -> tuple[RequestRecord, dict[str, Any]]:
        rec = RequestRecord(request_id="r", started_at=0.0, tenant=tenant, app="app")
        rec.route = RouteDecision("light", "llama", "test")
        return rec, {"messages": [{"role": "user", "content": content}]}

    for _ in range(200):
        with pytest.raises(UpstreamUnavailable):
            await dispatcher.complete(*request("acme", [{"type": "text", "text": "x"}]))
    rec, body = request("alice", "hello")
    await dispatcher.complete(rec, body)
    assert rec.extra["breaker"] == "llama=closed"
    # a second tenant failing the same way: failures from two callers count (all of them)
    with pytest.raises(UpstreamUnavailable):
        await dispatcher.complete(*request("bob", [{"type": "text", "text": "y"}]))
    assert state(breaker) is BreakerState.OPEN
