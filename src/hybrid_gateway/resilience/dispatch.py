"""Dispatch to a lane's channel with retries, a retry budget and per-channel circuit breakers.

For each attempt: the lane's primary channel unless its breaker refuses, then its backup (the
answer is marked ``fallback="breaker"``), else ``CircuitOpen`` (503, Retry-After = seconds until
half-open).  A failed attempt is recorded in that channel's breaker; a retryable one is retried
after the policy's wait if the budget allows, else the last error is raised; with
``retry_on_backup`` a retryable failure on the primary is retried on the backup at once
(``fallback="failover"``).  A stream is only retried while opening: once its iterator is handed
out, it is never retried, but its breaker outcome waits for its end: a success when it delivers
``[DONE]`` (or ends cleanly), a failure when the upstream breaks or stalls mid-stream, nothing
when the client goes away first.  Each outcome goes back with the breaker's ``Admission`` for
that attempt, so an attempt let through before the breaker last changed state counts for nothing.

What counts is classified here (``_outcome``): a request the server refused (4xx, or a 500
shaped like a validation error, both ``RequestError``) or the gateway refused for the channel's
profile counts for nothing; a 500 (or 501, 505...) is ``SUSPECT`` (it may follow from the
request: the breaker counts it only across callers or for a shape answered before); 502-504,
429, connection errors, timeouts and broken streams are ``FAILURE``.  Each outcome goes with
the request's ``Caller`` (tenant/app and request shape).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from hybrid_gateway.errors import CircuitOpen, GatewayError, Overloaded, UpstreamError
from hybrid_gateway.resilience.breaker import (
    Admission,
    BreakerState,
    Caller,
    CircuitBreaker,
    Outcome,
)
from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.resilience.lanes import LaneGate, LaneGates
from hybrid_gateway.resilience.retry import RetryBudget, RetryPolicy
from hybrid_gateway.resilience.shape import request_shape
from hybrid_gateway.types import RequestRecord
from hybrid_gateway.upstreams.pool.context import bind_attempts
from hybrid_gateway.upstreams.sse import DONE

__all__ = ["Channel", "DispatchParts", "Dispatcher", "LaneChannels", "RetryListener"]

_T = TypeVar("_T")
# The fallbacks the dispatcher itself marks; it clears only these when a retry goes back to the
# primary, so a mark made before dispatch (a budget downgrade, a deadline) stays.
_CHANNEL_FALLBACKS = frozenset({"failover", "breaker"})


class Channel(Protocol):
    name: str

    async def complete(self, body: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]]: ...

    def open_stream(
        self, body: Mapping[str, Any]
    ) -> AbstractAsyncContextManager[AsyncIterator[bytes]]: ...


class RetryListener(Protocol):
    def retry(self, channel: str, code: str) -> None: ...


@dataclass(frozen=True, slots=True)
class LaneChannels:
    primary: Channel
    backup: Channel | None = None
    # A retryable failure on the primary is retried on the backup at once (while the backup's
    # breaker is closed), without spending the retry budget: the failing channel gets no extra
    # load, so the budget that protects it has nothing to guard.
    retry_on_backup: bool = False


@dataclass(frozen=True, slots=True)
class DispatchParts:
    lanes: Mapping[str, LaneChannels]
    clock: Clock
    budget: RetryBudget
    policy: RetryPolicy | None = None  # None: retries off
    breakers: Mapping[str, CircuitBreaker] | None = None  # None: breakers off
    retry_listeners: Sequence[RetryListener] = ()
    # No retry starts later than this after dispatch began (waits included).
    max_elapsed_s: float = 10.0
    # Per (lane, channel) slots and bounded queues (resilience/lanes.py); None: channel limits only.
    gates: LaneGates | None = None


# Statuses a proxy or the server's own front sends when the server is down or overloaded: they
# never follow from the request.  Any other 5xx the server answered might.
_HEALTH_STATUSES = frozenset({"upstream_status_502", "upstream_status_503", "upstream_status_504"})


def _outcome(exc: GatewayError) -> Outcome:
    if isinstance(exc, UpstreamError):
        if exc.code.startswith("upstream_status_5") and exc.code not in _HEALTH_STATUSES:
            return Outcome.SUSPECT
        return Outcome.FAILURE
    if isinstance(exc, Overloaded):
        # An upstream 429 counts against the channel; the gateway's own full queue does not.
        return Outcome.FAILURE if exc.code == "upstream_rate_limited" else Outcome.IGNORED
    # A RequestError: the request was wrong (the server said so, or the gateway did for the
    # channel's profile); it says nothing about the server's health and is not counted.
    return Outcome.IGNORED


def _caller(record: RequestRecord, body: Mapping[str, Any]) -> Caller:
    return Caller(f"{record.tenant}/{record.app}", request_shape(body))


class _Verdict:
    """One attempt's breaker outcome, reported once, with the admission it was let in on."""

    __slots__ = ("_admission", "_breaker", "_caller")

    def __init__(
        self,
        breaker: CircuitBreaker | None,
        admission: Admission | None,
        caller: Caller | None = None,
    ) -> None:
        self._breaker, self._admission, self._caller = breaker, admission, caller

    @property
    def probe(self) -> bool:
        """A half-open probe: it holds the breaker's only slot(s) until settled."""
        return self._admission is not None and self._admission.probe

    def settle(self, outcome: Outcome) -> None:
        breaker, self._breaker = self._breaker, None
        if breaker is not None:
            breaker.record(outcome, self._admission, self._caller)


class _Judged:
    """A stream's payloads, settling its verdict as soon as they show how the channel did.

    A class, not an async generator: nothing to close, and no end left to a finalizer.  A
    reader that stops early (the client went away) settles nothing here; ``open_stream``
    settles ``IGNORED`` when its context exits.
    """

    __slots__ = ("_payloads", "_verdict")

    def __init__(self, payloads: AsyncIterator[bytes], verdict: _Verdict) -> None:
        self._payloads, self._verdict = payloads, verdict

    def __aiter__(self) -> _Judged:
        return self

    async def __anext__(self) -> bytes:
        try:
            payload = await anext(self._payloads)
        except StopAsyncIteration:
            self._verdict.settle(Outcome.SUCCESS)  # ended cleanly
            raise
        except GatewayError as exc:  # the upstream broke or stalled mid-stream
            self._verdict.settle(_outcome(exc))
            raise
        except BaseException:  # cancelled: the client went away
            self._verdict.settle(Outcome.IGNORED)
            raise
        if payload.strip() == DONE or self._verdict.probe:
            # complete, whatever the client does next; or a half-open probe that is answering:
            # the channel is back, and the probe's slot must not be held for a whole
            # generation while every other request of a lane without a backup gets a 503
            self._verdict.settle(Outcome.SUCCESS)
        return payload


class Dispatcher:
    def __init__(self, parts: DispatchParts) -> None:
        self._p = parts

    async def complete(
        self, record: RequestRecord, body: Mapping[str, Any]
    ) -> tuple[Channel, tuple[bytes, dict[str, Any]]]:
        async def attempt(channel: Channel) -> tuple[bytes, dict[str, Any]]:
            if self._gate(record, channel) is None:  # no lane queue: no context to enter
                return await channel.complete(body)
            async with self._slot(record, channel):
                return await channel.complete(body)

        channel, result, verdict = await self._run(record, attempt, _caller(record, body))
        verdict.settle(Outcome.SUCCESS)
        self._note_breaker(record, channel.name)
        return channel, result

    @asynccontextmanager
    async def open_stream(
        self, record: RequestRecord, body: Mapping[str, Any]
    ) -> AsyncIterator[tuple[Channel, AsyncIterator[bytes]]]:
        async def attempt(channel: Channel) -> tuple[AsyncExitStack, AsyncIterator[bytes]]:
            stack = AsyncExitStack()
            try:
                await stack.enter_async_context(self._slot(record, channel))
                payloads = await stack.enter_async_context(channel.open_stream(body))
            except BaseException:
                await stack.aclose()
                raise
            return stack, payloads

        caller = _caller(record, body)
        channel, (stack, payloads), verdict = await self._run(record, attempt, caller)
        self._note_breaker(record, channel.name)
        try:
            async with stack:
                yield channel, _Judged(payloads, verdict)
        finally:
            verdict.settle(Outcome.IGNORED)  # left before the stream ended; else a no-op

    @asynccontextmanager
    async def _slot(self, record: RequestRecord, channel: Channel) -> AsyncIterator[None]:
        """The lane's own slot on ``channel`` (when the lane has a queue); wait -> queue_ms."""
        gate = self._gate(record, channel)
        if gate is None:
            yield
            return
        async with gate.slot() as waited:
            record.extra["queue_ms"] = record.extra.get("queue_ms", 0.0) + waited * 1000
            yield

    def _gate(self, record: RequestRecord, channel: Channel) -> LaneGate | None:
        gates, route = self._p.gates, record.route
        return gates.get(route.lane, channel.name) if gates is not None and route else None

    def breaker(self, channel: str) -> CircuitBreaker | None:
        return (self._p.breakers or {}).get(channel)

    async def _run(
        self,
        record: RequestRecord,
        attempt: Callable[[Channel], Awaitable[_T]],
        caller: Caller | None = None,
    ) -> tuple[Channel, _T, _Verdict]:
        """Attempts until one succeeds; its breaker verdict is left to the caller to settle."""
        bind_attempts(record)  # a channel with endpoints sends a retry to another one
        self._p.budget.record_request()
        retries = 0
        started = self._p.clock.now()
        failed: str | None = None
        while True:
            channel, verdict = self._pick(record, failed, caller)
            try:
                result = await attempt(channel)
            except GatewayError as exc:
                verdict.settle(_outcome(exc))
                self._note_breaker(record, channel.name)
                failover = self._failover(record, channel.name)
                wait = self._retry_wait(retries + 1, exc, started, spend=not failover)
                if wait is None:
                    raise
                for listener in self._p.retry_listeners:
                    listener.retry(channel.name, exc.code)
                retries = record.retries = retries + 1
                failed = channel.name
                if not failover:
                    await self._p.clock.sleep(wait)
                continue
            except BaseException:  # cancelled: free a half-open probe slot, count nothing
                verdict.settle(Outcome.IGNORED)
                raise
            return channel, result, verdict

    def _failover(self, record: RequestRecord, failed: str) -> bool:
        """Is the next attempt of this request a failover to its lane's healthy backup?"""
        assert record.route is not None
        lane = self._p.lanes[record.route.lane]
        if not lane.retry_on_backup or lane.backup is None or failed != lane.primary.name:
            return False
        breaker = self.breaker(lane.backup.name)
        return breaker is None or breaker.state is BreakerState.CLOSED

    def _pick(
        self, record: RequestRecord, failed: str | None = None, caller: Caller | None = None
    ) -> tuple[Channel, _Verdict]:
        route = record.route
        assert route is not None, "dispatch runs after routing"
        lane = self._p.lanes[route.lane]
        if failed is not None and self._failover(record, failed):
            assert lane.backup is not None
            breaker = self.breaker(lane.backup.name)  # closed (``_failover``): lets it through
            admission = breaker.allow() if breaker is not None else None
            failover = _Verdict(breaker, admission, caller)
            record.route, record.fallback = replace(route, channel=lane.backup.name), "failover"
            return lane.backup, failover
        if (verdict := self._admit(lane.primary, caller)) is not None:
            if route.channel != lane.primary.name:  # back from a backup (replace() costs)
                record.route = replace(route, channel=lane.primary.name)
            if record.fallback in _CHANNEL_FALLBACKS:  # an earlier attempt's; others stay
                record.fallback = None
            return lane.primary, verdict
        if lane.backup is not None and (verdict := self._admit(lane.backup, caller)) is not None:
            record.route, record.fallback = replace(route, channel=lane.backup.name), "breaker"
            return lane.backup, verdict
        name = lane.primary.name
        self._note_breaker(record, name)
        breaker = self.breaker(name)
        wait = breaker.retry_after_s() if breaker is not None else 1.0
        raise CircuitOpen(
            f"channel {name} is failing and its circuit breaker is open; retry later",
            retry_after_s=wait,
        )

    def _admit(self, channel: Channel, caller: Caller | None) -> _Verdict | None:
        """The verdict to settle for an attempt on ``channel``; None: its breaker refuses."""
        breaker = self.breaker(channel.name)
        if breaker is None:
            return _Verdict(None, None)
        admission = breaker.allow()
        return None if admission is None else _Verdict(breaker, admission, caller)

    def _retry_wait(
        self, retry: int, exc: GatewayError, started: float, *, spend: bool = True
    ) -> float | None:
        policy = self._p.policy
        if policy is None or not policy.is_retryable(exc):
            return None
        wait = policy.delay(retry, exc)
        if wait is None:
            return None
        if self._p.clock.now() - started + wait > self._p.max_elapsed_s:
            return None  # too late: the client has waited long enough for this answer
        if spend and not self._p.budget.try_spend():
            return None
        return wait

    def _note_breaker(self, record: RequestRecord, channel: str) -> None:
        breaker = self.breaker(channel)
        if breaker is not None:
            record.extra["breaker"] = f"{channel}={breaker.state.value}"
