"""One endpoint of a pool: its client, its load, its latency estimate and its health."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from hybrid_gateway.upstreams.pool.health import EndpointHealth

__all__ = ["Endpoint", "EndpointClient", "Request"]


class EndpointClient(Protocol):
    """What ``OpenAIChannel`` offers: the dispatcher's channel protocol plus its lifetime."""

    async def complete(self, body: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]]: ...

    def open_stream(
        self, body: Mapping[str, Any]
    ) -> AbstractAsyncContextManager[AsyncIterator[bytes]]: ...

    async def aclose(self) -> None: ...

    @property
    def idle_connections(self) -> int: ...


# Weight of the newest sample in the latency estimate.
EWMA_ALPHA = 0.2


@dataclass(slots=True, eq=False)
class Endpoint:
    index: int
    name: str
    url: str
    weight: float
    max_concurrency: int
    client: EndpointClient
    health: EndpointHealth
    in_flight: int = 0
    # Seconds to the answer (non-streamed) or to the stream's head, smoothed; 0: no sample.
    ewma_s: float = 0.0
    requests: int = 0

    @property
    def load(self) -> float:
        """In-flight requests per unit of weight (what the load-aware policies compare)."""
        return self.in_flight / self.weight

    @property
    def has_slot(self) -> bool:
        return self.in_flight < self.max_concurrency

    def observe_latency(self, seconds: float) -> None:
        self.ewma_s = seconds if self.ewma_s == 0.0 else (
            self.ewma_s + EWMA_ALPHA * (seconds - self.ewma_s)
        )  # fmt: skip


@dataclass(slots=True)
class Request:
    """What a policy may read of a request: the body, and its session key when there is one."""

    body: object
    session: str | None = None
    # prefix_affinity's block hashes, computed once per request (a retry reuses them)
    chain: list[int] | None = field(default=None)
