"""A channel served by several endpoints: the same upstream protocol as one client.

``EndpointPool`` holds one client per endpoint (``OpenAIChannel``: its own keep-alive pool,
``max_concurrency`` slots, profile), and for each request asks its policy which available
endpoint takes it.  Available: healthy, or due its one probe after an ejection (``health.py``);
an endpoint this request already failed on is skipped while another is available (the failed
endpoints travel with the request, ``context.py``), and one with a free slot is preferred.

A connection that could not be opened sent nothing, so the pool tries the next endpoint at
once; any other failure goes back to the dispatcher, whose retry (policy, budget) lands on
another endpoint.  With every endpoint ejected the pool raises the single client's connection
error (``upstream_connection_error``), so the channel's breaker and the lane's backup take over
as they do for a single endpoint.

A reload may change the endpoints in place (``replace_endpoints``, prepared by ``resize.py``):
kept endpoints keep their state; a removed one is retired at once (never picked again, its
metrics dropped) and drains: its requests in flight finish, then its client closes.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

from hybrid_gateway.config import ChannelConfig
from hybrid_gateway.errors import GatewayError, Overloaded, RequestError, UpstreamUnavailable
from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.types import EndpointChoice
from hybrid_gateway.upstreams.http1 import ConnectFailed
from hybrid_gateway.upstreams.pool.active import ActiveChecks
from hybrid_gateway.upstreams.pool.context import current_attempts
from hybrid_gateway.upstreams.pool.endpoint import Endpoint, PoolLoad, Request
from hybrid_gateway.upstreams.pool.health import HealthState
from hybrid_gateway.upstreams.pool.maker import EndpointMaker
from hybrid_gateway.upstreams.pool.policies import Policy
from hybrid_gateway.upstreams.pool.resume import WatchedStream, should_resume

__all__ = ["EndpointListener", "EndpointPool", "EndpointStatus"]

_log = logging.getLogger(__name__)


class EndpointListener(Protocol):
    def endpoint_state(self, channel: str, endpoint: str, state: str) -> None: ...

    def endpoint_load(self, channel: str, endpoint: str, in_flight: int) -> None: ...

    def endpoint_result(self, channel: str, endpoint: str, outcome: str) -> None: ...

    def stream_resume(self, channel: str, endpoint: str, outcome: str) -> None:
        """A stream broke mid-way on ``endpoint``: ``resumed`` elsewhere, ``unavailable`` (no
        other endpoint answered) or ``given_up`` (the resend differed)."""
        ...

    def endpoint_removed(self, channel: str, endpoint: str) -> None:
        """A reload removed the endpoint: its series go (nothing more is told of it)."""
        ...


class _Health(enum.Enum):
    SUCCESS = "success"
    FAILURE = "failure"
    NEUTRAL = "neutral"


def _health_outcome(exc: GatewayError) -> _Health:
    if isinstance(exc, RequestError):  # the server answered: it is up
        return _Health.SUCCESS
    if isinstance(exc, Overloaded):  # its 429, or the endpoint's own slots full: busy, not down
        return _Health.NEUTRAL
    return _Health.FAILURE  # connection errors, 5xx, timeouts, bad or broken answers


def _sent_nothing(exc: GatewayError) -> bool:
    """The connection was never opened (refused, unreachable): safe to send elsewhere now."""
    return isinstance(exc.__context__, ConnectFailed)


@dataclass(frozen=True, slots=True)
class EndpointStatus:
    """One endpoint as /healthz shows it."""

    name: str
    url: str
    state: str
    in_flight: int
    latency_ms: float
    requests: int
    ejections: int
    probe_in_s: float


def _status(e: Endpoint) -> EndpointStatus:
    return EndpointStatus(
        e.name, e.url, e.health.state.value, e.in_flight, round(e.ewma_s * 1000, 1),
        e.requests, e.health.ejections_total, round(e.health.retry_in_s(), 3),
    )  # fmt: skip


class EndpointPool:
    def __init__(
        self,
        name: str,
        config: ChannelConfig,
        endpoints: Sequence[Endpoint],
        policy: Policy,
        clock: Clock,
        *,
        listeners: Sequence[EndpointListener] = (),
        maker: EndpointMaker | None = None,
        checks: ActiveChecks | None = None,
    ) -> None:
        self.name, self.config = name, config
        self.endpoints = tuple(endpoints)
        self.policy = policy
        self.maker = maker  # how a reload makes new endpoints (None: it cannot add any)
        self._clock = clock
        self._listeners = tuple(listeners)
        self._session_header = config.balancing.session_header
        self._checks = checks
        # endpoints not healthy now (ejected or probing): while none is, every endpoint is
        # available and ``pick`` skips the scan
        self._out: set[int] = set()
        # in flight over the endpoints, and how many have every slot taken: while none has,
        # ``pick`` skips that scan
        self._load = PoolLoad()
        for endpoint in self.endpoints:
            endpoint.attach(self._load)
        # removed by a reload, requests still in flight; and their clients' closing
        self.draining: list[Endpoint] = []
        self._closing: set[asyncio.Task[None]] = set()
        for endpoint in self.endpoints:
            endpoint.health.listen(partial(self.state_changed, endpoint))

    async def aclose(self) -> None:
        if self._checks is not None:
            await self._checks.aclose()
        for endpoint in (*self.endpoints, *self.draining):
            await endpoint.client.aclose()
        if self._closing:
            await asyncio.gather(*self._closing)

    @property
    def idle_connections(self) -> int:
        return sum(e.client.idle_connections for e in (*self.endpoints, *self.draining))

    def status(self) -> list[EndpointStatus]:
        """The endpoints in service, then those draining after a reload removed them."""
        return [*map(_status, self.endpoints),
                *(replace(_status(e), state="draining") for e in self.draining)]  # fmt: skip

    def replace_endpoints(
        self,
        config: ChannelConfig,
        endpoints: Sequence[Endpoint],
        new_policy: Callable[[Sequence[Endpoint]], Policy] | None = None,
    ) -> list[Endpoint]:
        """From now on ``endpoints`` serve (a reload; no await, so no request sees a mix).

        Endpoints of the current set listed again (the same objects) keep their state and take
        their position as index; the others are new.  The policy is re-indexed, or replaced by
        ``new_policy(endpoints)``.  Returns the removed endpoints: retired at once, they drain.
        """
        listed = {id(e) for e in endpoints}
        moved = {e.index: i for i, e in enumerate(endpoints) if e in self.endpoints}
        removed = [e for e in self.endpoints if id(e) not in listed]
        added = [e for e in endpoints if e not in self.endpoints]
        for i, endpoint in enumerate(endpoints):
            endpoint.index = i
        self.endpoints, self.config = tuple(endpoints), config
        self._session_header = config.balancing.session_header
        if new_policy is None:
            self.policy.reindex(self.endpoints, moved, config.balancing)
        else:
            self.policy = new_policy(self.endpoints)
        self._out = {e.index for e in self.endpoints if e.health.state is not HealthState.HEALTHY}
        if self._checks is not None:
            self._checks.replace(self.endpoints)
        for endpoint in removed:  # (first: a name moved to another URL keeps its new series)
            endpoint.attach(PoolLoad())
            self._retire(endpoint)
        for endpoint in added:
            endpoint.attach(self._load)
            endpoint.health.listen(partial(self.state_changed, endpoint))
            for listener in self._listeners:
                listener.endpoint_state(self.name, endpoint.name, endpoint.health.state.value)
        return removed

    def _retire(self, endpoint: Endpoint) -> None:
        endpoint.retired = True
        for listener in self._listeners:
            listener.endpoint_removed(self.name, endpoint.name)
        self.draining.append(endpoint)
        if not endpoint.in_flight:
            self._close(endpoint)

    def _close(self, endpoint: Endpoint) -> None:
        """A retired endpoint has no request left: close its client (its keep-alive pool)."""
        self.draining.remove(endpoint)
        task = asyncio.get_running_loop().create_task(endpoint.client.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def state_changed(self, endpoint: Endpoint, state: HealthState) -> None:
        """The health listener of each endpoint."""
        if endpoint.retired:  # (its index may be another endpoint's now)
            return
        if state is HealthState.HEALTHY:
            self._out.discard(endpoint.index)
        else:
            self._out.add(endpoint.index)
        if state is HealthState.EJECTED:
            self.policy.forget(endpoint)
        for listener in self._listeners:
            listener.endpoint_state(self.name, endpoint.name, state.value)

    # -- the upstream protocol -------------------------------------------------------------
    async def complete(self, body: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]]:
        request, failed = self._request(body)
        while True:
            endpoint, probe = self.pick(request, failed)
            started = self._clock.now()
            self._enter(endpoint)
            try:
                result = await endpoint.client.complete(body)
            except GatewayError as exc:
                self._settle(endpoint, _health_outcome(exc), probe, failed)
                if _sent_nothing(exc) and self._others_available(failed):
                    continue
                raise
            except BaseException:
                self._settle(endpoint, _Health.NEUTRAL, probe, failed)
                raise
            finally:
                self._leave(endpoint)
            endpoint.observe_latency(self._clock.now() - started)
            self._settle(endpoint, _Health.SUCCESS, probe, failed)
            return result

    @asynccontextmanager
    async def open_stream(self, body: Mapping[str, Any]) -> AsyncIterator[AsyncIterator[bytes]]:
        request, failed = self._request(body)
        stack, endpoint, payloads = await self._attempt_stream(body, request, failed)
        resume = should_resume(self.config.resume_streams, body)
        watched = WatchedStream(payloads, self, endpoint, stack)
        if resume:
            watched.resumable(body, request, failed)
        try:
            yield watched
        finally:
            await watched.stack.aclose()

    async def _attempt_stream(
        self, body: Mapping[str, Any], request: Request, failed: set[str]
    ) -> tuple[AsyncExitStack, Endpoint, AsyncIterator[bytes]]:
        """Open the stream on an endpoint that answers 200 (the next one at once when a
        connection could not be opened); the stack leaves the endpoint and closes the stream."""
        while True:
            endpoint, probe = self.pick(request, failed)
            started = self._clock.now()
            self._enter(endpoint)
            stack = AsyncExitStack()
            stack.callback(self._leave, endpoint)
            try:
                payloads = await stack.enter_async_context(endpoint.client.open_stream(body))
            except GatewayError as exc:
                await stack.aclose()
                self._settle(endpoint, _health_outcome(exc), probe, failed)
                if _sent_nothing(exc) and self._others_available(failed):
                    continue
                raise
            except BaseException:
                await stack.aclose()
                self._settle(endpoint, _Health.NEUTRAL, probe, failed)
                raise
            endpoint.observe_latency(self._clock.now() - started)
            self._settle(endpoint, _Health.SUCCESS, probe, failed)  # it answered 200
            return stack, endpoint, payloads

    async def resume_stream(
        self,
        body: Mapping[str, Any],
        request: Request,
        failed: set[str],
        broken: Endpoint,
        chars: int,
    ) -> tuple[AsyncExitStack, Endpoint, AsyncIterator[bytes]] | None:
        """The request again on another endpoint, ``broken`` having died ``chars`` characters
        into its answer; None when no other endpoint is available or none answers."""
        failed.add(broken.name)
        if not self._others_available(failed):
            _log.warning("channel %s: stream broke on endpoint %s after %d characters; not "
                         "resumed: no other endpoint available", self.name, broken.name,
                         chars)  # fmt: skip
            self.resume_outcome(broken, "unavailable")
            return None
        try:
            opened = await self._attempt_stream(body, request, failed)
        except GatewayError as exc:
            _log.warning("channel %s: stream broke on endpoint %s after %d characters; "
                         "not resumed: %s", self.name, broken.name, chars, exc)  # fmt: skip
            self.resume_outcome(broken, "unavailable")
            return None
        attempts = current_attempts()
        if attempts is not None:
            attempts.resumed(self.name, broken.name, chars)
        _log.warning("channel %s: stream broke on endpoint %s after %d characters; resending "
                     "to %s", self.name, broken.name, chars, opened[1].name)  # fmt: skip
        return opened

    def resume_outcome(self, broken: Endpoint, outcome: str) -> None:
        if broken.retired:
            return
        for listener in self._listeners:
            listener.stream_resume(self.name, broken.name, outcome)

    # -- internals -------------------------------------------------------------------------
    def _request(self, body: Mapping[str, Any]) -> tuple[Request, set[str]]:
        if self._checks is not None:
            self._checks.start()
        attempts = current_attempts()
        session = body.get("user")
        if self._session_header is not None and attempts is not None:
            session = attempts.header(self._session_header) or session
        request = Request(body, session if isinstance(session, str) and session else None)
        return request, attempts.failed_on(self.name) if attempts is not None else set()

    def pick(self, request: Request, failed: set[str]) -> tuple[Endpoint, bool]:
        """The endpoint that takes this attempt now (noted on the request), and whether it is
        that endpoint's probe."""
        available: Sequence[Endpoint] = self.endpoints
        if self._out:
            available = [e for e in available if e.health.available()]
        if not available:
            wait = min(e.health.retry_in_s() for e in self.endpoints)
            raise UpstreamUnavailable(
                f"channel {self.name} could not be reached: all {len(self.endpoints)} endpoints "
                f"are ejected (next probe in {wait:.1f} s)",
                channel=self.name,
                code="upstream_connection_error",
            )
        fresh = [e for e in available if e.name not in failed] if failed else available
        candidates = fresh or available
        if self._load.full:  # some endpoint has every slot taken
            candidates = [e for e in candidates if e.has_slot] or candidates
        choice = self.policy.choose(candidates, request)
        endpoint = choice.endpoint
        attempts = current_attempts()
        if attempts is not None:
            attempts.note(EndpointChoice(self.name, endpoint.name, self.policy.name, choice.reason))
        return endpoint, endpoint.health.admit()

    def _others_available(self, failed: set[str]) -> bool:
        return any(e.name not in failed and e.health.available() for e in self.endpoints)

    def _enter(self, endpoint: Endpoint) -> None:
        endpoint.in_flight += 1
        endpoint.requests += 1
        for listener in self._listeners:
            listener.endpoint_load(self.name, endpoint.name, endpoint.in_flight)

    def _leave(self, endpoint: Endpoint) -> None:
        endpoint.in_flight -= 1
        if endpoint.retired:
            if not endpoint.in_flight:
                self._close(endpoint)
            return
        for listener in self._listeners:
            listener.endpoint_load(self.name, endpoint.name, endpoint.in_flight)

    def _settle(self, endpoint: Endpoint, outcome: _Health, probe: bool, failed: set[str]) -> None:
        health = endpoint.health
        if outcome is _Health.SUCCESS:
            health.success(probe)
        elif outcome is _Health.FAILURE:
            failed.add(endpoint.name)
            health.failure(probe)
        else:
            health.settle_neutral(probe)
        if endpoint.retired:
            return
        for listener in self._listeners:
            listener.endpoint_result(self.name, endpoint.name, outcome.value)

    def stream_broke(self, endpoint: Endpoint) -> None:
        """A stream this endpoint was answering broke or stalled mid-way."""
        endpoint.health.failure()
        if endpoint.retired:
            return
        for listener in self._listeners:
            listener.endpoint_result(self.name, endpoint.name, _Health.FAILURE.value)
