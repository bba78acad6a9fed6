"""``/healthz`` (is it serving, and how well) and ``/readyz`` (may a load balancer send traffic).

``/healthz`` always answers 200 while the process runs; its ``status`` is ``degraded`` when a
shared store is down, a channel's circuit breaker is not closed, or a channel failed each of
its last ``server.health.failed_requests`` requests (``ChannelHealth``), and ``problems`` names
each one.  ``/readyz`` answers 200 only between start-up (listening, and the embedder warm,
if there is one) and the drain that a SIGTERM begins (``Lifecycle``), 503 before and during
it (the OpenAI error object, ``code`` ``starting`` or ``draining``).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Mapping

import orjson
from aiohttp import web

from hybrid_gateway import __version__
from hybrid_gateway.api.error_mapping import error_payload
from hybrid_gateway.embedding.base import AsyncEmbedder
from hybrid_gateway.resilience.breaker import BreakerState, CircuitBreaker
from hybrid_gateway.types import CacheOutcome, RequestRecord

__all__ = [
    "ChannelHealth", "Lifecycle", "Phase", "channel_problems", "health_body", "readiness_response",
]  # fmt: skip


_HITS = (CacheOutcome.EXACT, CacheOutcome.SEMANTIC)
_log = logging.getLogger("hybrid_gateway.serve")


class Phase(enum.StrEnum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"


class Lifecycle:
    """Where the process stands: starting until it listens and its embedder has answered once,
    ready, draining after SIGTERM."""

    __slots__ = ("_warming", "phase")

    def __init__(self) -> None:
        self.phase = Phase.STARTING
        self._warming: asyncio.Task[None] | None = None

    def ready(self) -> None:
        if self.phase is Phase.STARTING:
            self.phase = Phase.READY

    def drain(self) -> None:
        self.phase = Phase.DRAINING

    def begin(self, embedder: AsyncEmbedder | None) -> None:
        """Listening: ready at once, or once ``embedder`` embedded a first text (the bundled
        model loads on first use, seconds on a busy machine); requests are served meanwhile."""
        if embedder is None:
            _log.info("ready")
            self.ready()
        else:
            self._warming = asyncio.get_running_loop().create_task(self._warm_up(embedder))

    async def _warm_up(self, embedder: AsyncEmbedder) -> None:
        started = time.monotonic()
        try:
            await embedder.embed_one("readiness check")
        except Exception:  # the semantic stage and the router fall back on their own
            _log.warning("the embedder failed its first embedding; ready anyway", exc_info=True)
        _log.info("ready", extra={"fields": {"warm_up_s": round(time.monotonic() - started, 3)}})
        self.ready()


class ChannelHealth:
    """Consecutive failed requests per channel, from every finished request's record.

    A request failed its channel when the channel's answer (or its silence) made it a 5xx
    (``upstream_*`` codes); an answer under 500 resets the count.  The gateway's own 5xx (an
    open breaker, a full queue) and cache hits leave it as it is.
    """

    def __init__(self, channels: list[str], failed_requests: int) -> None:
        self._limit = failed_requests
        self._failures = dict.fromkeys(channels, 0)

    def observe(self, record: RequestRecord) -> None:
        route = record.route
        if route is None or route.channel not in self._failures or record.cache in _HITS:
            return
        code = record.error_code
        if record.status >= 500 and code is not None and code.startswith("upstream_"):
            self._failures[route.channel] += 1
        elif record.status < 500:
            self._failures[route.channel] = 0

    def failing(self) -> dict[str, int]:
        """Channels whose last ``failed_requests`` requests all failed, with the count."""
        return {name: n for name, n in self._failures.items() if n >= self._limit}


def channel_problems(
    health: ChannelHealth, breaker: Callable[[str], CircuitBreaker | None], channels: list[str]
) -> list[dict[str, object]]:
    problems: list[dict[str, object]] = []
    failing = health.failing()
    for name in channels:
        cb = breaker(name)
        state = cb.state if cb is not None else BreakerState.CLOSED
        if state is not BreakerState.CLOSED:
            problems.append({"channel": name, "problem": f"breaker_{state.value}"})
        if name in failing:
            problems.append(
                {"channel": name, "problem": "failing", "consecutive_failures": failing[name]}
            )
    return problems


def health_body(
    stores: Mapping[str, Mapping[str, object] | None],
    problems: list[dict[str, object]],
    channels: list[str],
    started_at: float,
) -> dict[str, object]:
    """The /healthz body: ``stores`` maps its key (store, records, semantic_store) to a status
    (None: not configured, left out)."""
    up = all(s["up"] for s in stores.values() if s is not None)
    body: dict[str, object] = {
        "status": "ok" if up and not problems else "degraded",
        "version": __version__,
        "uptime_s": round(time.time() - started_at, 3),
        "channels": channels,
    }
    body |= {key: value for key, value in stores.items() if value is not None}
    body["problems"] = problems
    return body


def readiness_response(lifecycle: Lifecycle, request_id: str) -> web.Response:
    """200 ``{"status": "ready"}``; else 503 with the error object, ``code`` the phase."""
    phase = lifecycle.phase
    if phase is Phase.READY:
        return web.Response(body=b'{"status":"ready"}', content_type="application/json")
    why = "is starting" if phase is Phase.STARTING else "is shutting down (draining)"
    payload = error_payload(
        f"The gateway {why}: send requests to another instance.",
        type_="overloaded_error", code=phase.value, param=None, request_id=request_id,
    )  # fmt: skip
    return web.Response(
        body=orjson.dumps(payload), status=503, content_type="application/json",
        headers={"x-request-id": request_id, "Retry-After": "1"},
    )  # fmt: skip
