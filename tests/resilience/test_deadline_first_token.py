"""``deadline_on: first_token``: a non-streamed answer in progress is not a fault (injected clock).

The request is streamed from the upstream and assembled.  It falls back only when its first
token misses the deadline, its tokens stop for ``stall_s``, or the stream breaks after it
started; a long answer whose tokens keep coming is the answer, however long it takes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest

from hybrid_gateway.config import GatewayConfig, parse_config
from hybrid_gateway.errors import ConfigError, UpstreamUnavailable
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.resilience.deadline import DeadlinePolicy, DeferredRunner
from hybrid_gateway.results.store import ResultsStore, ResultState
from hybrid_gateway.types import ChatRequest, ChatResult, RequestRecord, RouteDecision, Usage
from hybrid_gateway.upstreams.sse import DONE_EVENT, frame_json

REQUEST = ChatRequest("auto", [{"role": "user", "content": "hi"}], False, False, {"n": 1})
END = object()


class Heavy:
    """A heavy lane whose stream yields exactly what the test puts, when it puts it."""

    def __init__(self) -> None:
        self.events: asyncio.Queue[Any] = asyncio.Queue()
        self.requests: list[ChatRequest] = []
        self.cached: list[str] = []

    def token(self, text: str) -> None:
        self.events.put_nowait(frame_json({"choices": [{"index": 0, "delta": {"content": text}}]}))

    def end(self) -> None:
        self.events.put_nowait(
            frame_json({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        )
        self.events.put_nowait(END)

    async def call(
        self, request: ChatRequest, record: RequestRecord, key: str, *, cache: bool = True
    ) -> ChatResult:
        assert record.route is not None and record.route.lane == "light", "heavy is streamed"
        record.usage, record.cost_usd = Usage(3, 4), 0.01
        return ChatResult(orjson.dumps({"answer": "light"}), Usage(3, 4))

    @asynccontextmanager
    async def open(
        self, request: ChatRequest, record: RequestRecord, key: str, *, cache: bool = True
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        self.requests.append(request)

        async def events() -> AsyncIterator[bytes]:
            count = 0
            while (item := await self.events.get()) is not END:
                if isinstance(item, Exception):
                    raise item
                count += 1
                yield item
            record.usage, record.cost_usd = Usage(3, count), 0.5
            if cache:
                self.cached.append(key)
            yield DONE_EVENT

        yield events()


def setup(stall_s: float | None = 1.0) -> tuple[DeferredRunner, ManualClock, ResultsStore]:
    clock = ManualClock()
    store = ResultsStore(clock, ttl_s=60, max_entries=10)
    policy = DeadlinePolicy(2.0, "light", "light-ch", first_token=True, stall_s=stall_s)
    runner = DeferredRunner({"heavy": policy}, clock, store, max_background=4)
    return runner, clock, store


def record() -> RequestRecord:
    rec = RequestRecord(request_id="req_1", started_at=0.0, tenant="acme")
    rec.route = RouteDecision("heavy", "heavy-ch", "default")
    return rec


async def settle(rounds: int = 30) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


async def start(runner: DeferredRunner, heavy: Heavy, rec: RequestRecord) -> asyncio.Task[Any]:
    """The client's non-streamed call, started and waiting on the heavy stream."""
    task = asyncio.ensure_future(runner.complete(REQUEST, rec, "k", heavy.call, heavy.open))
    await settle()
    return task


def content(body: bytes) -> str:
    return str(orjson.loads(body)["choices"][0]["message"]["content"])


async def test_a_long_answer_that_keeps_coming_is_the_answer_past_the_deadline() -> None:
    runner, clock, store = setup()
    heavy, rec = Heavy(), record()
    task = await start(runner, heavy, rec)
    await clock.advance(1.5)
    heavy.token("a long")
    for _ in range(6):  # 6 s in all, three times the deadline, never a pause of 1 s
        await settle()
        await clock.advance(0.75)
        heavy.token(" answer")
    heavy.end()
    await settle()
    assert task.done()
    result = task.result()
    assert content(result.body).startswith("a long answer answer")
    assert orjson.loads(result.body)["object"] == "chat.completion"
    assert result.usage == Usage(3, 8) and rec.usage == Usage(3, 8) and rec.cost_usd == 0.5
    assert rec.fallback is None and rec.route == record().route
    assert store.get("req_1", "acme") is None and heavy.cached == ["k"]
    [sent] = heavy.requests  # the upstream was asked for a stream with usage
    assert sent.stream and sent.include_usage and sent.body == {"n": 1, "stream": True}


async def test_no_first_token_by_the_deadline_falls_back_and_keeps_the_late_answer() -> None:
    runner, clock, store = setup()
    heavy, rec = Heavy(), record()
    task = await start(runner, heavy, rec)
    await clock.advance(1.9)
    await settle()
    assert not task.done()
    await clock.advance(0.1)
    await settle()
    assert orjson.loads(task.result().body) == {"answer": "light"}
    assert rec.fallback == "timeout" and rec.route is not None
    assert (rec.route.lane, rec.route.rule) == ("light", "deadline:heavy")
    heavy.token("late")
    heavy.end()
    await settle()
    done = store.get("req_1", "acme")
    assert done is not None and done.state is ResultState.DONE and content(done.body) == "late"


async def test_tokens_that_stop_for_stall_s_fall_back() -> None:
    runner, clock, store = setup(stall_s=1.0)
    heavy, rec = Heavy(), record()
    task = await start(runner, heavy, rec)
    heavy.token("first")
    await settle()
    await clock.advance(0.9)
    await settle()
    assert not task.done()
    await clock.advance(0.1)
    await settle()
    assert orjson.loads(task.result().body) == {"answer": "light"}
    assert rec.route is not None and rec.route.rule == "stall:heavy"
    heavy.token(" then the rest")
    heavy.end()
    await settle()
    done = store.get("req_1", "acme")
    assert done is not None and content(done.body) == "first then the rest"


async def test_without_stall_s_a_started_answer_is_waited_for() -> None:
    runner, clock, _ = setup(stall_s=None)
    heavy, rec = Heavy(), record()
    task = await start(runner, heavy, rec)
    heavy.token("first")
    await settle()
    await clock.advance(60)
    await settle()
    assert not task.done()
    heavy.end()
    await settle()
    assert content(task.result().body) == "first" and rec.fallback is None


async def test_a_stream_that_breaks_after_its_first_token_is_answered_by_the_fallback() -> None:
    runner, _, store = setup()
    heavy, rec = Heavy(), record()
    task = await start(runner, heavy, rec)
    heavy.token("half")
    heavy.events.put_nowait(
        UpstreamUnavailable("reset", channel="heavy-ch", code="upstream_stream_broken")
    )
    await settle()
    assert orjson.loads(task.result().body) == {"answer": "light"}
    assert rec.route is not None and rec.route.rule == "broken:heavy"
    failed = store.get("req_1", "acme")
    assert failed is not None and failed.state is ResultState.FAILED
    assert failed.error_code == "upstream_stream_broken"


async def test_a_failure_before_the_first_token_raises_as_in_answer_mode() -> None:
    runner, _, store = setup()
    heavy, rec = Heavy(), record()
    heavy.events.put_nowait(UpstreamUnavailable("down", channel="heavy-ch", code="upstream_x"))
    with pytest.raises(UpstreamUnavailable):
        await runner.complete(REQUEST, rec, "k", heavy.call, heavy.open)
    assert rec.fallback is None and store.get("req_1", "acme") is None


async def test_a_client_that_leaves_cancels_the_upstream_stream() -> None:
    runner, _, _ = setup()
    heavy, rec = Heavy(), record()
    task = await start(runner, heavy, rec)
    heavy.token("first")
    await settle()
    task.cancel()
    await settle()
    assert task.cancelled() and runner.background == 0
    assert heavy.cached == []  # the stream was closed, not finished


async def test_n_above_one_keeps_the_answers_deadline() -> None:
    """A server without native n fans a non-streamed n=2 out; a stream it would refuse."""
    runner, _, _ = setup()
    heavy, rec = Heavy(), record()
    called: list[str] = []

    async def call(
        request: ChatRequest, record: RequestRecord, key: str, *, cache: bool = True
    ) -> ChatResult:
        assert record.route is not None
        called.append(record.route.lane)
        record.usage = Usage(3, 8)
        return ChatResult(b"{}", Usage(3, 8))

    two = ChatRequest("auto", REQUEST.messages, False, False, {"n": 2})
    assert (await runner.complete(two, rec, "k", call, heavy.open)).body == b"{}"
    assert called == ["heavy"] and heavy.requests == []


def lanes_config(**heavy: Any) -> GatewayConfig:
    return parse_config(
        {
            "channels": {
                "l": {"base_url": "http://127.0.0.1:1/v1", "model": "l"},
                "h": {"base_url": "http://127.0.0.1:2/v1", "model": "h"},
            },
            "lanes": {"light": {"channel": "l"}, "heavy": {"channel": "h", **heavy}},
            "routing": {"default_lane": "light"},
        },
        "gateway.yaml",
    )


def test_the_config_takes_first_token_with_a_deadline_and_refuses_it_alone() -> None:
    config = lanes_config(
        deadline_s=2, fallback_lane="light", deadline_on="first_token", stall_s=1.5
    )
    assert config.lanes["heavy"].deadline_on == "first_token"
    with pytest.raises(ConfigError, match=r"lanes\.heavy\.deadline_on"):
        lanes_config(deadline_on="first_token")
    with pytest.raises(ConfigError, match=r"lanes\.heavy\.stall_s"):
        lanes_config(deadline_s=2, fallback_lane="light", stall_s=1.5)
    with pytest.raises(ConfigError, match=r"lanes\.heavy\.deadline_on"):
        lanes_config(deadline_s=2, fallback_lane="light", deadline_on="first_byte")
