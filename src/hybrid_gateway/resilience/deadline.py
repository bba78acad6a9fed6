"""Timeout fallback with later delivery: answer from a faster lane at the deadline, keep going.

For a lane with ``deadline_s`` and ``fallback_lane``, the request is sent to its own lane as
usual, but on a copy of its record (the *shadow*).  If the answer (streams: the first byte) comes
before the deadline, the shadow's facts are copied back and nothing else happens.  If not:

- the client is answered from ``fallback_lane`` at once, marked ``fallback="timeout"``, with the
  URL of the late answer (``x-gateway-result-url: /v1/gateway/results/{request_id}``); the
  fallback answer is not cached (the better one is on its way).  With a shared store the
  answer waits (at most ``PUBLISH_WAIT_S``, in parallel with the fallback call, so normally not
  at all) until the ``pending`` entry is in the store, so that every replica answers the URL
  from the moment the client has it;
- the slow request keeps running in the background, up to ``max_background`` of them (past that
  a request waits for its own lane instead); when it finishes, its answer is (a) stored for
  ``GET /v1/gateway/results/{request_id}``, (b) POSTed to the configured webhook, (c) written to
  the cache by the pipeline's own call path (the same write as any answer), and its usage and
  cost go to the request log as a row of its own, ``{request_id}.late`` with ``fallback="late"``.

``aclose`` cancels the background requests (their results become ``failed``,
``deferred_cancelled``) and waits for them, so shutdown leaves no task behind.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from hybrid_gateway.errors import GatewayError
from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.resilience.deadline_feed import (
    END,
    Feed,
    broke,
    copy_record,
    relay,
    shadow_of,
)
from hybrid_gateway.results.store import ResultsStore
from hybrid_gateway.results.webhook import WebhookSender
from hybrid_gateway.types import (
    ADMITTED_TOKENS,
    ChatRequest,
    ChatResult,
    RequestRecord,
    RouteDecision,
)
from hybrid_gateway.upstreams.answers import asked_choices

__all__ = ["DeadlinePolicy", "DeferredListener", "DeferredRunner", "result_url"]

RESULTS_PATH = "/v1/gateway/results/"
PUBLISH_WAIT_S = 0.25  # the longest a fallback answer waits for its result URL to be shared


def result_url(request_id: str) -> str:
    return RESULTS_PATH + request_id


class CompleteCall(Protocol):
    def __call__(
        self, request: ChatRequest, record: RequestRecord, key: str, *, cache: bool = True
    ) -> Awaitable[ChatResult]: ...


class OpenStream(Protocol):
    def __call__(
        self, request: ChatRequest, record: RequestRecord, key: str, *, cache: bool = True
    ) -> AbstractAsyncContextManager[AsyncIterator[bytes]]: ...


class DeferredListener(Protocol):
    def deferred(self, lane: str, outcome: str) -> None: ...

    def observe_late(self, record: RequestRecord) -> None: ...


@dataclass(frozen=True, slots=True)
class DeadlinePolicy:
    deadline_s: float
    fallback_lane: str
    fallback_channel: str  # the fallback lane's primary (the dispatcher may pick its backup)
    # ``deadline_on: first_token``: a non-streamed request is streamed from the upstream and
    # assembled; the deadline is its first token's, and ``stall_s`` bounds each pause after it.
    first_token: bool = False
    stall_s: float | None = None


class DeferredRunner:
    def __init__(
        self,
        policies: Mapping[str, DeadlinePolicy],
        clock: Clock,
        results: ResultsStore,
        *,
        max_background: int,
        log: Callable[[RequestRecord], None] | None = None,
        webhook: WebhookSender | None = None,
        listeners: Sequence[DeferredListener] = (),
    ) -> None:
        self._policies = dict(policies)
        self._clock = clock
        self._results = results
        self._max_background = max_background
        self._log = log
        self._webhook = webhook
        self._listeners = listeners
        self._background: set[asyncio.Task[None]] = set()

    @property
    def background(self) -> int:
        return len(self._background)

    def covers(self, record: RequestRecord) -> bool:
        route = record.route
        return (
            route is not None
            and route.lane in self._policies
            and len(self._background) < self._max_background
        )

    # -- non-streamed ----------------------------------------------------------------------
    async def complete(
        self,
        request: ChatRequest,
        record: RequestRecord,
        key: str,
        call: CompleteCall,
        open_stream: OpenStream | None = None,
    ) -> ChatResult:
        policy = self._policy(record)
        # n > 1 keeps the answer's deadline: a server without native n can fan a
        # non-streamed request out (upstreams/profiles.py), not a stream
        if policy.first_token and open_stream is not None and asked_choices(request) == 1:
            return await self._complete_streamed(request, record, key, call, open_stream, policy)
        shadow = shadow_of(record)
        started = self._clock.now()
        task = asyncio.ensure_future(call(request, shadow, key))
        if await self._in_time(task, policy.deadline_s) or not self._room():
            try:
                await task  # in time, or no room to keep it running: wait for it as it is
            finally:
                copy_record(shadow, record)
            return task.result()

        async def body() -> bytes:
            return (await task).body

        return await self._fall_back(request, record, key, call, body(), shadow, started)

    async def _complete_streamed(
        self,
        request: ChatRequest,
        record: RequestRecord,
        key: str,
        call: CompleteCall,
        open_stream: OpenStream,
        policy: DeadlinePolicy,
    ) -> ChatResult:
        """``first_token``: the answer is streamed upstream and assembled; it falls back only
        when its first token misses the deadline, its tokens stop for ``stall_s`` or the
        stream breaks after it started: a long answer that keeps coming is the normal path."""
        streamed = dataclasses.replace(
            request, stream=True, include_usage=True, body={**request.body, "stream": True}
        )
        shadow = shadow_of(record)
        started = self._clock.now()
        feed = Feed(self._clock.now)
        feed.detach()  # assembled as it comes, for the client or for later delivery
        producer = asyncio.ensure_future(self._produce(open_stream, streamed, shadow, key, feed))
        cause = "deadline"
        try:
            if await self._first_event(feed, producer, policy.deadline_s):
                cause = "stall"
                if policy.stall_s is None:
                    await asyncio.wait({producer})
                else:
                    await self._until_stall(feed, producer, policy.stall_s)
        except asyncio.CancelledError:
            producer.cancel()
            raise
        if producer.done() and broke(producer, feed):
            cause = "broken"  # after its first token: not retried, so the fallback answers
        elif producer.done() or not self._room():
            try:  # done, or no room to keep it running: wait for it as it is
                body = await self._late_stream(producer, feed, shadow)
            finally:
                copy_record(shadow, record)
            usage = shadow.usage
            assert usage is not None, "the relay settles every stream it opened"
            return ChatResult(body, usage)
        late = self._late_stream(producer, feed, shadow)
        return await self._fall_back(request, record, key, call, late, shadow, started, cause)

    async def _fall_back(
        self,
        request: ChatRequest,
        record: RequestRecord,
        key: str,
        call: CompleteCall,
        late: Awaitable[bytes],
        shadow: RequestRecord,
        started: float,
        cause: str = "deadline",
    ) -> ChatResult:
        """Keep the slow answer running for later delivery; answer from the fallback lane now."""
        shared = self._adopt(late, shadow, started)
        self._mark(record, self._policy(shadow), cause)
        try:
            result = await call(request, record, key, cache=False)
        finally:
            record.fallback = "timeout"  # the dispatcher notes its own choice of channel
        await self._shared(shared)
        return result

    async def _first_event(
        self, feed: Feed, producer: asyncio.Future[None], limit_s: float
    ) -> bool:
        """Wait up to ``limit_s`` for the stream's first event or its end: did one come?"""
        first = asyncio.ensure_future(feed.moved.wait())
        timer: asyncio.Future[Any] = asyncio.ensure_future(self._clock.sleep(limit_s))
        waiters: set[asyncio.Future[Any]] = {first, producer, timer}
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            first.cancel()
            timer.cancel()
        return feed.moved.is_set() or producer.done()

    async def _until_stall(
        self, feed: Feed, producer: asyncio.Future[None], stall_s: float
    ) -> None:
        """Wait for the stream's end, or until no event has come for ``stall_s``.  It wakes
        once per ``stall_s`` at most, not once per token."""
        while not producer.done():
            quiet_s = self._clock.now() - feed.last_at
            if quiet_s >= stall_s:
                return
            await self._in_time(producer, stall_s - quiet_s)

    # -- streamed --------------------------------------------------------------------------
    @asynccontextmanager
    async def stream(
        self, request: ChatRequest, record: RequestRecord, key: str, open_stream: OpenStream
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        policy = self._policy(record)
        shadow = shadow_of(record)
        started = self._clock.now()
        feed = Feed()
        producer = asyncio.ensure_future(self._produce(open_stream, request, shadow, key, feed))
        first = asyncio.ensure_future(feed.queue.get())
        try:
            in_time = await self._in_time(first, policy.deadline_s)
            if not in_time and not self._room():
                in_time = True
                await first  # no room to keep it running: wait for its first byte as it is
        except asyncio.CancelledError:
            first.cancel()
            producer.cancel()
            raise
        if not in_time:
            first.cancel()  # an event queued meanwhile stays queued: detach() assembles it
            feed.detach()
            shared = self._adopt(self._late_stream(producer, feed, shadow), shadow, started)
            self._mark(record, policy)
            try:
                async with open_stream(request, record, key, cache=False) as events:
                    record.fallback = "timeout"  # the dispatcher notes its own choice of channel
                    await self._shared(shared)
                    yield events
            finally:
                record.fallback = "timeout"
            return
        head = first.result()
        copy_record(shadow, record)  # the route, channel and retries it took: the response headers
        if isinstance(head, BaseException):
            raise head
        try:
            yield relay(head, feed, shadow, record)
        finally:
            if not producer.done():
                producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)
            copy_record(shadow, record)  # the relay's own copy does not run if the client hung up

    async def _produce(
        self,
        open_stream: OpenStream,
        request: ChatRequest,
        shadow: RequestRecord,
        key: str,
        feed: Feed,
    ) -> None:
        try:
            async with open_stream(request, shadow, key) as events:
                async for event in events:
                    feed.put(event)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            feed.put(exc)
            if feed.assembler is not None:
                raise  # detached: the background owner records the failure
            return
        feed.put(END)

    async def _late_stream(
        self, producer: asyncio.Future[None], feed: Feed, shadow: RequestRecord
    ) -> bytes:
        await producer
        assembler = feed.assembler
        assert assembler is not None
        if feed.error is not None:
            raise feed.error
        return assembler.completion_body(shadow.usage or assembler.final_usage(0))

    # -- the background half ---------------------------------------------------------------
    def _adopt(
        self, answer: Awaitable[bytes], shadow: RequestRecord, started: float
    ) -> Awaitable[None] | None:
        """Run the slow answer on in the background; returns the result entry's shared write."""
        route = shadow.route
        lane = route.lane if route is not None else "none"
        shared = self._results.open(shadow.request_id, shadow.tenant, lane)
        task = asyncio.ensure_future(self._finish(answer, shadow, started, lane))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        self._count(lane, "fallback")
        return shared

    async def _finish(
        self, answer: Awaitable[bytes], shadow: RequestRecord, started: float, lane: str
    ) -> None:
        request_id = shadow.request_id
        payload: dict[str, object] = {"object": "gateway.deferred_result", "id": request_id}
        try:
            body = await answer
        except asyncio.CancelledError:
            self._results.fail(request_id, 503, "deferred_cancelled", "the gateway shut down")
            shadow.status, shadow.error_code = 503, "deferred_cancelled"
            self._close(shadow, started, lane, "cancelled")
            raise
        except GatewayError as exc:
            self._results.fail(request_id, exc.status, exc.code, exc.message)
            shadow.status, shadow.error_code = exc.status, exc.code
            payload |= {"status": "failed", "error": {"code": exc.code, "message": exc.message}}
        except Exception:  # a bug: record it like the API layer does, as a 500
            self._results.fail(request_id, 500, "internal_error", "the late answer failed")
            shadow.status, shadow.error_code = 500, "internal_error"
            payload |= {"status": "failed", "error": {"code": "internal_error"}}
        else:
            self._results.finish(request_id, body)
            payload |= {"status": "done", "response": orjson.Fragment(body)}
        self._close(shadow, started, lane, "done" if shadow.status == 200 else "failed")
        webhook = self._webhook
        if webhook is not None and webhook.covers(shadow.tenant):
            webhook.submit(request_id, orjson.dumps(payload))

    def _close(self, shadow: RequestRecord, started: float, lane: str, outcome: str) -> None:
        shadow.latency_ms = (self._clock.now() - started) * 1000
        shadow.request_id = f"{shadow.request_id}.late"
        shadow.fallback = "late"
        # the prompt was admitted (and is trued up) with the client's row: every token of this
        # row is its own, or the token quota would be refunded the prompt twice
        shadow.extra[ADMITTED_TOKENS] = 0
        if self._log is not None:
            self._log(shadow)
        for listener in self._listeners:
            listener.observe_late(shadow)
        self._count(lane, outcome)

    async def aclose(self) -> None:
        tasks = list(self._background)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- helpers ---------------------------------------------------------------------------
    def _room(self) -> bool:
        """May one more slow request run on in the background?"""
        return len(self._background) < self._max_background

    def _policy(self, record: RequestRecord) -> DeadlinePolicy:
        assert record.route is not None, "deadlines apply after routing"
        return self._policies[record.route.lane]

    async def _in_time(self, task: asyncio.Future[Any], deadline_s: float) -> bool:
        """Wait for ``task`` up to the deadline; a caller cancelled meanwhile cancels it too."""
        timer: asyncio.Future[Any] = asyncio.ensure_future(self._clock.sleep(deadline_s))
        try:
            await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            timer.cancel()
        return task.done()

    async def _shared(self, write: Awaitable[None] | None) -> None:
        """Wait (at most ``PUBLISH_WAIT_S``) for the pending entry to reach the shared store."""
        if write is not None:
            await self._in_time(asyncio.ensure_future(write), PUBLISH_WAIT_S)

    def _mark(self, record: RequestRecord, policy: DeadlinePolicy, cause: str = "deadline") -> None:
        route = record.route
        assert route is not None
        record.route = RouteDecision(
            policy.fallback_lane, policy.fallback_channel, f"{cause}:{route.lane}"
        )
        record.fallback = "timeout"
        record.extra["result_url"] = result_url(record.request_id)
        record.extra["deferred_lane"] = route.lane

    def _count(self, lane: str, outcome: str) -> None:
        for listener in self._listeners:
            listener.deferred(lane, outcome)
