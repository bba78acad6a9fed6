"""Late answers, held for ``GET /v1/gateway/results/{request_id}``: bounded, with a TTL.

An entry opens when a request is answered from its fallback lane at the deadline (``pending``)
and closes when the slow lane's answer arrives (``done``, with the chat.completion body) or
fails (``failed``, with the error).  Only the tenant that sent the request may read it: for any
other tenant the entry does not exist, so request ids cannot be probed across tenants.

Memory is bounded by ``max_entries`` (oldest first out) and every entry expires ``ttl_s`` after
it opened; expiry is checked lazily on the injected clock, so nothing runs in the background.

With a shared store (``stores.backend: redis``) every change is also handed to a ``Mirror``
that copies it there, and ``lookup`` falls back to the mirror for ids this replica never saw,
so any replica answers for a request another one ran.  ``open`` returns the mirror's write so
the caller can hold the answer that carries the result URL until other replicas can see it.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import Protocol

from hybrid_gateway.resilience.clock import Clock

__all__ = ["DeferredResult", "Mirror", "ResultState", "ResultsStore"]


class ResultState(enum.StrEnum):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class DeferredResult:
    request_id: str
    tenant: str
    lane: str
    state: ResultState
    opened_at: float  # clock seconds
    body: bytes = b""  # DONE: the chat.completion
    status: int = 200  # FAILED: the HTTP status the error maps to
    error_code: str | None = None
    error_message: str | None = None


class Mirror(Protocol):
    def publish(self, entry: DeferredResult, ttl_s: float) -> Awaitable[None] | None:
        """Copy ``entry`` to the shared store; the awaitable completes once that was tried."""
        ...

    async def fetch(self, request_id: str) -> DeferredResult | None:
        """The shared entry or None; a ``GatewayError`` when the store cannot be read."""
        ...


class ResultsStore:
    def __init__(self, clock: Clock, *, ttl_s: float, max_entries: int) -> None:
        self._clock = clock
        self._ttl_s = ttl_s
        self._max = max_entries
        self._entries: OrderedDict[str, DeferredResult] = OrderedDict()
        self._mirror: Mirror | None = None

    def share(self, mirror: Mirror) -> None:
        """Copy every change to ``mirror`` from now on (set once, when the runtime is built)."""
        self._mirror = mirror

    def __len__(self) -> int:
        return len(self._entries)

    def open(self, request_id: str, tenant: str, lane: str) -> Awaitable[None] | None:
        """Open a pending entry; returns the shared-store write (None without a mirror)."""
        self._expire()
        entry = DeferredResult(request_id, tenant, lane, ResultState.PENDING, self._clock.now())
        self._entries[request_id] = entry
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
        return self._publish(entry)

    def finish(self, request_id: str, body: bytes) -> None:
        entry = self._pending(request_id)
        if entry is not None:
            self._entries[request_id] = done = replace(entry, state=ResultState.DONE, body=body)
            self._publish(done)

    def fail(self, request_id: str, status: int, code: str, message: str) -> None:
        entry = self._pending(request_id)
        if entry is not None:
            self._entries[request_id] = failed = replace(
                entry, state=ResultState.FAILED, status=status, error_code=code,
                error_message=message,
            )  # fmt: skip
            self._publish(failed)

    def get(self, request_id: str, tenant: str) -> DeferredResult | None:
        """The entry if it exists, has not expired and belongs to ``tenant``; else None."""
        self._expire()
        entry = self._entries.get(request_id)
        if entry is None or entry.tenant != tenant:
            return None
        return entry

    async def lookup(self, request_id: str, tenant: str) -> DeferredResult | None:
        """``get``, then the mirror (another replica's request) when this replica has no entry."""
        entry = self.get(request_id, tenant)
        if entry is None and self._mirror is not None:
            shared = await self._mirror.fetch(request_id)
            entry = shared if shared is not None and shared.tenant == tenant else None
        return entry

    def _publish(self, entry: DeferredResult) -> Awaitable[None] | None:
        if self._mirror is None:
            return None
        return self._mirror.publish(entry, entry.opened_at + self._ttl_s - self._clock.now())

    def _pending(self, request_id: str) -> DeferredResult | None:
        """None when the entry expired or was evicted meanwhile: nobody can ask for it now."""
        entry = self._entries.get(request_id)
        return entry if entry is not None and entry.state is ResultState.PENDING else None

    def _expire(self) -> None:
        horizon = self._clock.now() - self._ttl_s
        while self._entries:
            first = next(iter(self._entries.values()))
            if first.opened_at > horizon:
                break
            self._entries.popitem(last=False)
