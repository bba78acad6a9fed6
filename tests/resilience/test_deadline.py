"""Deadline fallback with later delivery, on an injected clock (no sleeping)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest

from hybrid_gateway.errors import UpstreamUnavailable
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.resilience.deadline import PUBLISH_WAIT_S, DeadlinePolicy, DeferredRunner
from hybrid_gateway.results.store import DeferredResult, ResultsStore, ResultState
from hybrid_gateway.types import (
    ADMITTED_TOKENS,
    ChatRequest,
    ChatResult,
    RequestRecord,
    RouteDecision,
    Usage,
)
from hybrid_gateway.upstreams.sse import DONE_EVENT, frame_json

REQUEST = ChatRequest("auto", [{"role": "user", "content": "hi"}], False, False, {})


class Lanes:
    """Stands in for the pipeline's call path: heavy waits for ``heavy_go``, light answers."""

    def __init__(self) -> None:
        self.heavy_go = asyncio.Event()
        self.heavy_error: Exception | None = None
        self.cached: list[tuple[str, str]] = []  # (lane, key) of answers written to the cache

    async def call(
        self, request: ChatRequest, record: RequestRecord, key: str, *, cache: bool = True
    ) -> ChatResult:
        assert record.route is not None
        lane = record.route.lane
        if lane == "heavy":
            await self.heavy_go.wait()
            if self.heavy_error is not None:
                raise self.heavy_error
        record.usage, record.cost_usd = Usage(3, 4), 0.5 if lane == "heavy" else 0.01
        if cache:
            self.cached.append((lane, key))
        return ChatResult(orjson.dumps({"answer": lane}), Usage(3, 4))

    @asynccontextmanager
    async def open(
        self, request: ChatRequest, record: RequestRecord, key: str, *, cache: bool = True
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        assert record.route is not None
        lane = record.route.lane
        if lane == "heavy":
            await self.heavy_go.wait()

        async def events() -> AsyncIterator[bytes]:
            for word in (lane, " answer"):
                yield frame_json({"choices": [{"index": 0, "delta": {"content": word}}]})
            yield frame_json({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            record.usage = Usage(3, 2)
            if cache:
                self.cached.append((lane, key))
            yield DONE_EVENT

        yield events()


class Sink:
    def __init__(self) -> None:
        self.logged: list[RequestRecord] = []
        self.outcomes: list[tuple[str, str]] = []

    def log(self, record: RequestRecord) -> None:
        self.logged.append(record)

    def deferred(self, lane: str, outcome: str) -> None:
        self.outcomes.append((lane, outcome))

    def observe_late(self, record: RequestRecord) -> None:
        pass


def setup(max_background: int = 4) -> tuple[DeferredRunner, ManualClock, ResultsStore, Sink]:
    clock = ManualClock()
    store = ResultsStore(clock, ttl_s=60, max_entries=10)
    sink = Sink()
    runner = DeferredRunner(
        {"heavy": DeadlinePolicy(8.0, "light", "light-ch")}, clock, store,
        max_background=max_background, log=sink.log, listeners=[sink],
    )  # fmt: skip
    return runner, clock, store, sink


def record(request_id: str = "req_1") -> RequestRecord:
    rec = RequestRecord(request_id=request_id, started_at=0.0, tenant="acme")
    rec.route = RouteDecision("heavy", "heavy-ch", "default")
    return rec


async def until_done(clock: ManualClock, task: asyncio.Future[Any], step: float) -> None:
    for _ in range(100):
        for _ in range(20):
            await asyncio.sleep(0)
        if task.done():
            return
        await clock.advance(step)
    raise AssertionError("never finished")


async def test_an_answer_before_the_deadline_is_the_answer() -> None:
    runner, clock, store, sink = setup()
    lanes, rec = Lanes(), record()
    task = asyncio.ensure_future(runner.complete(REQUEST, rec, "k", lanes.call))
    await asyncio.sleep(0)
    await clock.advance(7.0)
    lanes.heavy_go.set()
    await until_done(clock, task, 0.1)
    assert orjson.loads(task.result().body) == {"answer": "heavy"}
    assert rec.fallback is None and rec.cost_usd == 0.5 and rec.route == record().route
    assert store.get("req_1", "acme") is None and sink.logged == [] and sink.outcomes == []


async def test_past_the_deadline_the_fallback_answers_and_the_late_answer_is_kept() -> None:
    runner, clock, store, sink = setup()
    lanes, rec = Lanes(), record()
    rec.extra[ADMITTED_TOKENS] = 3  # admission's prompt estimate, trued up with this row
    task = asyncio.ensure_future(runner.complete(REQUEST, rec, "k", lanes.call))
    for _ in range(5):  # let it start its timer
        await asyncio.sleep(0)
    await clock.advance(7.9)
    assert not task.done()
    await until_done(clock, task, 0.2)
    assert clock.now() == pytest.approx(8.1)
    assert orjson.loads(task.result().body) == {"answer": "light"}
    assert rec.fallback == "timeout"
    assert rec.route == RouteDecision("light", "light-ch", "deadline:heavy")
    assert rec.extra["result_url"] == "/v1/gateway/results/req_1"
    assert lanes.cached == []  # the fallback answer is not cached
    pending = store.get("req_1", "acme")
    assert pending is not None and pending.state is ResultState.PENDING
    assert store.get("req_1", "other-tenant") is None
    assert runner.background == 1

    lanes.heavy_go.set()
    await clock.advance(0.1)
    done = store.get("req_1", "acme")
    assert done is not None and done.state is ResultState.DONE
    assert orjson.loads(done.body) == {"answer": "heavy"}
    assert lanes.cached == [("heavy", "k")]  # the late answer goes to the cache
    [late] = sink.logged
    assert (late.request_id, late.fallback, late.status, late.cost_usd) == (
        "req_1.late",
        "late",
        200,
        0.5,
    )
    assert late.route is not None and late.route.lane == "heavy"
    assert rec.extra[ADMITTED_TOKENS] == 3 and late.extra[ADMITTED_TOKENS] == 0  # not twice
    assert sink.outcomes == [("heavy", "fallback"), ("heavy", "done")]
    assert runner.background == 0


async def test_a_late_failure_is_stored_as_the_error() -> None:
    runner, clock, store, sink = setup()
    lanes, rec = Lanes(), record()
    lanes.heavy_error = UpstreamUnavailable("boom", channel="heavy-ch", code="upstream_status_502")
    task = asyncio.ensure_future(runner.complete(REQUEST, rec, "k", lanes.call))
    await until_done(clock, task, 1.0)
    lanes.heavy_go.set()
    await clock.advance(0.1)
    failed = store.get("req_1", "acme")
    assert failed is not None and failed.state is ResultState.FAILED
    assert (failed.status, failed.error_code) == (502, "upstream_status_502")
    assert sink.logged[0].error_code == "upstream_status_502"
    assert sink.outcomes[-1] == ("heavy", "failed")


async def test_at_the_background_bound_a_request_waits_for_its_own_lane() -> None:
    runner, clock, _, _ = setup(max_background=1)
    lanes = Lanes()
    first, second = record("a"), record("b")
    tasks = [
        asyncio.ensure_future(runner.complete(REQUEST, rec, "k", lanes.call))
        for rec in (first, second)
    ]  # both past the deadline at once: room for one slow request only
    await until_done(clock, tasks[0], 1.0)
    assert first.fallback == "timeout" and runner.background == 1
    assert not tasks[1].done() and not runner.covers(record("c"))
    lanes.heavy_go.set()
    await until_done(clock, tasks[1], 0.1)
    assert orjson.loads(tasks[1].result().body) == {"answer": "heavy"}
    assert second.fallback is None and second.cost_usd == 0.5


async def test_shutdown_cancels_background_requests_and_says_so() -> None:
    runner, clock, store, sink = setup()
    lanes = Lanes()
    task = asyncio.ensure_future(runner.complete(REQUEST, record(), "k", lanes.call))
    await until_done(clock, task, 1.0)
    await runner.aclose()
    cancelled = store.get("req_1", "acme")
    assert cancelled is not None and cancelled.state is ResultState.FAILED
    assert cancelled.error_code == "deferred_cancelled"
    assert sink.outcomes[-1] == ("heavy", "cancelled") and runner.background == 0


async def test_a_stream_without_a_first_byte_by_the_deadline_falls_back() -> None:
    runner, clock, store, sink = setup()
    lanes, rec = Lanes(), record()

    async def client() -> bytes:
        async with runner.stream(REQUEST, rec, "k", lanes.open) as events:
            return b"".join([e async for e in events])

    task = asyncio.ensure_future(client())
    await until_done(clock, task, 1.0)
    assert b"light" in task.result() and rec.fallback == "timeout"
    lanes.heavy_go.set()
    await clock.advance(0.1)
    done = store.get("req_1", "acme")
    assert done is not None and done.state is ResultState.DONE
    body = orjson.loads(done.body)
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == "heavy answer"
    assert body["usage"]["completion_tokens"] == 2
    assert lanes.cached == [("heavy", "k")] and sink.logged[0].request_id == "req_1.late"


async def test_a_stream_that_starts_in_time_is_relayed_unchanged() -> None:
    runner, _, store, _ = setup()
    lanes, rec = Lanes(), record()
    lanes.heavy_go.set()
    async with runner.stream(REQUEST, rec, "k", lanes.open) as events:
        text = b"".join([e async for e in events])
    assert b"heavy" in text and text.endswith(DONE_EVENT)
    assert rec.fallback is None and rec.usage == Usage(3, 2)
    assert store.get("req_1", "acme") is None


async def test_a_stream_the_client_leaves_in_time_keeps_what_the_shadow_billed() -> None:
    runner, _, _, _ = setup()
    go_on = asyncio.Event()

    @asynccontextmanager
    async def open_stream(
        request: ChatRequest, record: RequestRecord, key: str, *, cache: bool = True
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        async def events() -> AsyncIterator[bytes]:
            try:
                yield frame_json({"choices": [{"index": 0, "delta": {"content": "one"}}]})
                await go_on.wait()  # the rest never comes: the client leaves first
                yield DONE_EVENT
            finally:  # as the pipeline's relay does: bill what was generated
                record.usage, record.cost_usd = Usage(3, 1), 0.25

        yield events()

    rec = record()
    async with runner.stream(REQUEST, rec, "k", open_stream) as events:
        async for _ in events:
            break  # the client hangs up after the first event
    assert rec.usage == Usage(3, 1) and rec.cost_usd == 0.25


async def test_an_in_time_streams_headers_see_the_channel_that_answers() -> None:
    runner, _, _, _ = setup()
    lanes, rec = Lanes(), record()
    lanes.heavy_go.set()

    @asynccontextmanager
    async def via_backup(
        request: ChatRequest, record: RequestRecord, key: str, *, cache: bool = True
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        assert record.route is not None  # the dispatcher, with the primary's breaker open:
        record.route = dataclasses.replace(record.route, channel="heavy-backup")
        record.fallback, record.retries = "breaker", 1
        async with lanes.open(request, record, key, cache=cache) as events:
            yield events

    async with runner.stream(REQUEST, rec, "k", via_backup) as events:
        # the response headers are written now, before the first event is relayed
        assert rec.route is not None and rec.route.channel == "heavy-backup"
        assert (rec.fallback, rec.retries) == ("breaker", 1)
        async for _ in events:
            pass


async def test_a_stream_that_fails_before_its_first_byte_raises_as_before() -> None:
    runner, _, _, _ = setup()
    rec = record()

    @asynccontextmanager
    async def broken(
        request: ChatRequest, record: RequestRecord, key: str, *, cache: bool = True
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        record.retries = 2
        raise UpstreamUnavailable("down", channel="heavy-ch", code="upstream_connection_error")
        yield  # pragma: no cover

    with pytest.raises(UpstreamUnavailable):
        async with runner.stream(REQUEST, rec, "k", broken):
            pass  # pragma: no cover
    assert rec.retries == 2  # what the attempt learned reaches the logged record


class SlowMirror:
    """A shared store whose writes complete only when the test says so."""

    def __init__(self) -> None:
        self.writes: list[tuple[ResultState, asyncio.Future[None]]] = []

    def publish(self, entry: DeferredResult, ttl_s: float) -> asyncio.Future[None]:
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.writes.append((entry.state, written))
        return written

    async def fetch(self, request_id: str) -> DeferredResult | None:
        return None


async def settle(rounds: int = 50) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


@pytest.mark.parametrize("streamed", [False, True])
async def test_the_fallback_answer_waits_until_its_result_url_is_shared(streamed: bool) -> None:
    """Another replica must find the pending entry as soon as the client has the URL."""
    runner, clock, store, _ = setup()
    mirror = SlowMirror()
    store.share(mirror)
    lanes, rec = Lanes(), record()

    async def client() -> bytes:
        if not streamed:
            return (await runner.complete(REQUEST, rec, "k", lanes.call)).body
        async with runner.stream(REQUEST, rec, "k", lanes.open) as events:
            return b"".join([e async for e in events])

    task = asyncio.ensure_future(client())
    await settle()
    await clock.advance(8.0)  # the deadline: the fallback lane answers at once ...
    await settle()
    [(state, written)] = mirror.writes
    assert state is ResultState.PENDING and rec.fallback == "timeout"
    assert not task.done()  # ... but the answer waits for the pending entry's write
    written.set_result(None)
    await settle()
    assert task.done() and b"light" in task.result()


async def test_a_shared_store_that_never_answers_delays_the_fallback_by_a_bound() -> None:
    runner, clock, store, _ = setup()
    store.share(SlowMirror())
    lanes, rec = Lanes(), record()
    task = asyncio.ensure_future(runner.complete(REQUEST, rec, "k", lanes.call))
    await settle()
    await clock.advance(8.0)
    await settle()
    assert not task.done()
    await clock.advance(PUBLISH_WAIT_S)
    await settle()
    assert task.done() and orjson.loads(task.result().body) == {"answer": "light"}
