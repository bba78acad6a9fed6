"""Pushing late answers to the webhook named in the config, with retries on the injected clock.

The URL is the config's (``resilience.deferred.webhook.url``) and nothing else: no request
field, header or tenant setting can point the gateway at another host, so the feature cannot be
turned into a request forwarder.  Each delivery is one JSON POST (``x-request-id`` doubles as an
idempotency key, since a retry after a lost 2xx sends the same body again); it is retried after
each wait in ``backoff_s`` on a connection error, a timeout, a 5xx, 408 or 429, and given up on
any other 4xx.  At most ``max_pending`` deliveries are in flight; more are dropped and counted
rather than queued without bound.  ``aclose`` cancels what is still waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Protocol

import aiohttp

from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.resilience.settings import WebhookConfig

__all__ = ["AiohttpPoster", "DeliveryListener", "Poster", "WebhookSender"]

_RETRY_STATUSES = frozenset({408, 429})


class Poster(Protocol):
    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> int:
        """POST and return the status; raise ``OSError`` or ``TimeoutError`` when none came."""
        ...

    async def aclose(self) -> None: ...


class DeliveryListener(Protocol):
    def webhook(self, outcome: str) -> None: ...


class AiohttpPoster:
    """The real transport: one aiohttp session, opened on first use."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> int:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        try:
            async with self._session.post(
                url, data=body, headers=dict(headers), timeout=aiohttp.ClientTimeout(timeout_s)
            ) as response:
                await response.read()
                return response.status
        except aiohttp.ClientError as exc:
            raise OSError(str(exc)) from None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class WebhookSender:
    def __init__(
        self,
        config: WebhookConfig,
        poster: Poster,
        clock: Clock,
        listeners: Sequence[DeliveryListener] = (),
    ) -> None:
        self._config = config
        self._poster = poster
        self._clock = clock
        self._listeners = listeners
        self._tasks: set[asyncio.Task[bool]] = set()

    @property
    def pending(self) -> int:
        return len(self._tasks)

    def covers(self, tenant: str) -> bool:
        tenants = self._config.tenants
        return tenants is None or tenant in tenants

    def submit(self, request_id: str, body: bytes) -> asyncio.Task[bool] | None:
        """Start delivering ``body``; None when ``max_pending`` deliveries are already running."""
        if len(self._tasks) >= self._config.max_pending:
            self._count("dropped")
            return None
        task = asyncio.ensure_future(self.deliver(request_id, body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def deliver(self, request_id: str, body: bytes) -> bool:
        """Try, then retry after each backoff wait; True once the receiver said 2xx."""
        headers = {"Content-Type": "application/json", "x-request-id": request_id}
        waits = self._config.backoff_s
        for attempt in range(len(waits) + 1):
            if attempt:
                await self._clock.sleep(waits[attempt - 1])
            try:
                status = await self._poster.post(
                    self._config.url, body, headers, self._config.timeout_s
                )
            except (OSError, TimeoutError):
                continue
            if 200 <= status < 300:
                self._count("delivered")
                return True
            if status < 500 and status not in _RETRY_STATUSES:
                break  # the receiver refuses this body: sending it again will not help
        self._count("failed")
        return False

    async def aclose(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._poster.aclose()

    def _count(self, outcome: str) -> None:
        for listener in self._listeners:
            listener.webhook(outcome)
