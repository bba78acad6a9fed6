"""A pool's stream that breaks mid-way, continued from another endpoint (``resume_streams``):
the catch-up on hand-made chunks, then the pool against real loopback replicas."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from hybrid_gateway.config import ChannelConfig
from hybrid_gateway.errors import UpstreamUnavailable
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.types import RequestRecord, RouteDecision
from hybrid_gateway.upstreams.pool.build import build_pool
from hybrid_gateway.upstreams.pool.context import bind_attempts
from hybrid_gateway.upstreams.pool.pool import EndpointPool
from hybrid_gateway.upstreams.pool.resume import CatchUp, Delivered, Diverged, should_resume
from tests.upstreams.pool.fakes import replicas
from tests.upstreams.pool.test_pool import Events

WORDS = ("The ", "answer ", "is ", "42.")


def chunk(content: str | None = None, *, finish: str | None = None, id_: str = "a",
          **delta: Any) -> bytes:  # fmt: skip
    if content is not None:
        delta["content"] = content
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return orjson.dumps({"id": id_, "created": 1, "object": "chat.completion.chunk",
                         "choices": [choice]})  # fmt: skip


def delivered(*payloads: bytes) -> Delivered:
    seen = Delivered()
    for payload in payloads:
        seen.see(payload)
    return seen


def test_the_resend_is_swallowed_until_it_passes_what_was_delivered() -> None:
    sent = delivered(chunk(role="assistant", content=""), chunk("The "), chunk("answer "))
    assert sent.ok and sent.text == "The answer " and sent.meta == {"id": "a", "created": 1}
    catch = CatchUp(sent)
    resend = [chunk(role="assistant", content="", id_="b"), chunk("The ", id_="b"),
              chunk("answer i", id_="b"), chunk("s 42.", id_="b"),
              chunk(finish="stop", id_="b"), b"[DONE]"]  # fmt: skip
    out = [catch.feed(p) for p in resend]
    assert out[:2] == [None, None]
    first = orjson.loads(out[2] or b"")
    assert first["id"] == "a" and first["choices"][0]["delta"] == {"content": "i"}
    assert [orjson.loads(p or b"")["id"] for p in out[3:5]] == ["a", "a"]
    assert orjson.loads(out[3] or b"")["choices"][0]["delta"] == {"content": "s 42."}
    assert out[5] == b"[DONE]"


def test_a_resend_that_ends_where_the_delivery_stopped_sends_only_the_end() -> None:
    catch = CatchUp(delivered(chunk("The "), chunk("answer")))
    assert catch.feed(chunk("The answer")) is None
    end = orjson.loads(catch.feed(chunk(finish="stop", id_="b")) or b"")
    assert end["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}
    assert end["id"] == "a"


@pytest.mark.parametrize(
    "resend",
    [
        [chunk("The "), chunk("question")],  # other words
        [chunk("The "), chunk(finish="stop")],  # shorter
        [chunk("The "), b"[DONE]"],  # ended
        [chunk("The ", tool_calls=[{"index": 0, "id": "c", "type": "function"}])],
    ],
)
def test_a_resend_that_says_anything_else_is_given_up(resend: list[bytes]) -> None:
    catch = CatchUp(delivered(chunk("The "), chunk("answer ")))
    with pytest.raises(Diverged):
        for payload in resend:
            catch.feed(payload)


@pytest.mark.parametrize(
    "payload",
    [
        chunk("x", tool_calls=[{"index": 0, "id": "c", "type": "function"}]),
        orjson.dumps({"id": "a", "choices": [{"index": 1, "delta": {"content": "x"}}]}),
        chunk("x", finish="stop"),  # the answer is whole: nothing to resume
        orjson.dumps({"id": "a", "choices": [{"index": 0, "delta": {"content": "x"},
                                              "logprobs": {"content": [{"token": "x"}]}}]}),
        b"not json",
    ],
)  # fmt: skip
def test_what_a_resend_could_not_be_checked_against_is_not_resumable(payload: bytes) -> None:
    assert not delivered(chunk("The "), payload).ok


def test_a_delta_field_that_says_nothing_does_not_stop_a_resume() -> None:
    # the same test as the cache's replay (upstreams/answers.empty_value): null, false, 0 and
    # empty containers say nothing a resend would have to match
    nothings: list[object] = [None, False, 0, "", [], {}]
    for nothing in nothings:
        quiet = orjson.dumps({"id": "a", "choices": [{"index": 0, "delta": {
            "content": "x", "refusal": nothing}, "logprobs": nothing}]})  # fmt: skip
        assert delivered(chunk("The "), quiet).ok
    said = orjson.dumps(
        {"id": "a", "choices": [{"index": 0, "delta": {"content": "x", "refusal": 1}}]}
    )
    assert not delivered(chunk("The "), said).ok


def test_which_requests_may_be_resumed() -> None:
    body: dict[str, Any] = {"model": "m", "messages": []}
    assert not should_resume("deterministic", body)
    assert should_resume("deterministic", {**body, "temperature": 0})
    assert should_resume("deterministic", {**body, "seed": 7})
    assert not should_resume("deterministic", {**body, "temperature": 0.7})
    assert should_resume("always", body)
    assert not should_resume("always", {**body, "n": 2})
    assert not should_resume("off", {**body, "temperature": 0})


def stream_pool(
    urls: list[str], mode: str = "deterministic", events: Events | None = None
) -> EndpointPool:
    config = ChannelConfig.model_validate({
        "model": "m", "connect_timeout_s": 1, "timeout_s": 5, "resume_streams": mode,
        "endpoints": [{"url": url, "name": f"e{i}"} for i, url in enumerate(urls)],
        "balancing": {"policy": "round_robin"},
        "health": {"consecutive_failures": 2, "base_ejection_s": 1.0},
    })  # fmt: skip
    return build_pool("c", config, api_key=None, ca_file=None, clock=ManualClock(),
                      listeners=[events] if events else [], rng=random.Random(1))  # fmt: skip


def texts(payloads: list[bytes]) -> tuple[str, set[str]]:
    """The answer the client got, and the stream ids it saw."""
    text, ids = "", set()
    for payload in payloads:
        if payload.strip() == b"[DONE]":
            continue
        parsed = orjson.loads(payload)
        ids.add(parsed["id"])
        for choice in parsed["choices"]:
            text += choice["delta"].get("content") or ""
    return text, ids


async def test_a_stream_cut_mid_way_is_continued_from_another_endpoint() -> None:
    async with replicas(2) as (a, b):
        a.words = b.words = WORDS
        a.mode, a.stream_id, b.stream_id = "cut=2", "from-a", "from-b"
        events = Events()
        up = stream_pool([a.url, b.url], events=events)
        record = RequestRecord(request_id="req_1", started_at=0.0)
        record.route = RouteDecision("heavy", "c", "test")
        bind_attempts(record)
        body = {"model": "m", "messages": [], "stream": True, "temperature": 0}
        async with up.open_stream(body) as payloads:
            got = [p async for p in payloads]
        assert texts(got) == ("The answer is 42.", {"from-a"})  # each word once, one id
        assert got[-1].strip() == b"[DONE]"
        assert (a.chats, b.chats) == (1, 1)
        assert [e.in_flight for e in up.endpoints] == [0, 0]
        assert ("e0", "failure") in events.results  # the break counts against its endpoint
        assert events.resumes == [("e0", "resumed")]
        assert record.route.endpoint is not None
        assert record.route.endpoint.endpoint == "e1"
        assert record.route.endpoint.reason == "resumed_from=e0; resumed_at=11"
        await up.aclose()


async def test_a_resend_with_another_answer_gives_the_client_the_original_break() -> None:
    async with replicas(2) as (a, b):
        a.words, b.words = WORDS, ("A ", "different ", "answer.")
        a.mode = "cut=2"
        events = Events()
        up = stream_pool([a.url, b.url], mode="always", events=events)
        got: list[bytes] = []
        with pytest.raises(UpstreamUnavailable) as raised:
            async with up.open_stream({"model": "m", "messages": [], "stream": True}) as payloads:
                async for payload in payloads:
                    got.append(payload)
        assert raised.value.code == "upstream_stream_broken"
        assert texts(got)[0] == "The answer "  # nothing of the other answer reached the client
        assert b.chats == 1 and [e.in_flight for e in up.endpoints] == [0, 0]
        assert events.resumes == [("e0", "given_up")]
        await up.aclose()


async def test_not_resumed_when_the_request_may_answer_otherwise_or_no_endpoint_is_left() -> None:
    async with replicas(2) as (a, b):
        a.words = b.words = WORDS
        a.mode = "cut=2"
        up = stream_pool([a.url, b.url])  # deterministic: this body has no temperature 0
        with pytest.raises(UpstreamUnavailable):
            async with up.open_stream({"model": "m", "messages": [], "stream": True}) as payloads:
                async for _ in payloads:
                    pass
        assert b.chats == 0
        await up.aclose()
        events = Events()
        alone = stream_pool([a.url], mode="always", events=events)
        with pytest.raises(UpstreamUnavailable):
            async with alone.open_stream({"model": "m", "messages": [], "stream": True}) as ps:
                async for _ in ps:
                    pass
        assert a.chats == 2 and events.resumes == [("e0", "unavailable")]
        await alone.aclose()
