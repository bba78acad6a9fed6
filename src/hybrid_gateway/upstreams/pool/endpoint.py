"""One endpoint of a pool: its client, its load, its latency estimate and its health."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from hybrid_gateway.upstreams.pool.health import EndpointHealth

__all__ = ["Endpoint", "EndpointClient", "PoolLoad", "Request"]


class EndpointClient(Protocol):
    """What ``OpenAIChannel`` offers: the dispatcher's channel protocol plus its lifetime."""

    async def complete(self, body: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]]: ...

    def open_stream(
        self, body: Mapping[str, Any]
    ) -> AbstractAsyncContextManager[AsyncIterator[bytes]]: ...

    async def aclose(self) -> None: ...

    def resize(self, max_concurrency: int) -> None:
        """Change the client's slots in place (a reload); requests in flight keep theirs."""
        ...

    @property
    def idle_connections(self) -> int: ...


# Weight of the newest sample in the latency estimate.
EWMA_ALPHA = 0.2


class PoolLoad:
    """What the endpoints of one pool have in flight together, and how many of them have every
    slot taken, kept by the endpoints' setters (``Endpoint.attach``): a pick skips its scan for
    full endpoints while there are none, and ``prefix_affinity``'s load guard reads the mean
    without a sum over the endpoints (at 64 endpoints, each of the two had been an eighth of a
    decision)."""

    __slots__ = ("endpoints", "full", "in_flight")

    def __init__(self) -> None:
        self.endpoints = 0  # attached
        self.full = 0
        self.in_flight = 0


class Endpoint:
    """One endpoint's state.  ``load`` (in flight per unit of weight) is kept up to date by the
    ``in_flight`` setter, so a policy compares plain attributes (``least_loaded`` over 64
    endpoints is one C-level ``min``); so is whether every slot is taken, counted in the
    ``PoolLoad`` of its pool (``attach``)."""

    __slots__ = (
        "_in_flight", "_max_concurrency", "client", "ewma_s", "health", "index", "load",
        "name", "pool_load", "requests", "retired", "url", "weight",
    )  # fmt: skip

    def __init__(
        self,
        *,
        index: int,
        name: str,
        url: str,
        weight: float,
        max_concurrency: int,
        client: EndpointClient,
        health: EndpointHealth,
    ) -> None:
        self.index, self.name, self.url = index, name, url
        self.weight, self._max_concurrency = weight, max_concurrency
        self.client, self.health = client, health
        self._in_flight = 0
        self.pool_load = PoolLoad()  # its own until a pool attaches it
        self.pool_load.endpoints = 1
        self.load = 0.0
        # seconds to the answer (non-streamed) or to the stream's head, smoothed; 0: no sample
        self.ewma_s = 0.0
        self.requests = 0
        # removed from its pool by a reload: no new request; the pool closes the client once
        # the requests in flight have finished
        self.retired = False

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @in_flight.setter
    def in_flight(self, value: int) -> None:
        load, was, cap = self.pool_load, self._in_flight, self._max_concurrency
        load.in_flight += value - was
        load.full += (value >= cap) - (was >= cap)  # (bools: +1 filled, -1 freed, 0 neither)
        self._in_flight = value
        self.load = value / self.weight

    @property
    def max_concurrency(self) -> int:
        return self._max_concurrency

    @max_concurrency.setter
    def max_concurrency(self, value: int) -> None:
        n = self._in_flight
        self.pool_load.full += (n >= value) - (n >= self._max_concurrency)
        self._max_concurrency = value

    @property
    def has_slot(self) -> bool:
        return self._in_flight < self._max_concurrency

    def attach(self, pool_load: PoolLoad) -> None:
        """Be counted in ``pool_load`` from now on (a pool's; a retired endpoint gets one of its
        own, so it no longer counts in its old pool's)."""
        old = self.pool_load
        old.endpoints -= 1
        pool_load.endpoints += 1
        old.in_flight -= self._in_flight
        pool_load.in_flight += self._in_flight
        if not self.has_slot:
            old.full -= 1
            pool_load.full += 1
        self.pool_load = pool_load

    def retune(self, weight: float, max_concurrency: int) -> None:
        """A reload's new weight and slots; load, latency and health are kept."""
        if max_concurrency != self._max_concurrency:
            self.client.resize(max_concurrency)
            self.max_concurrency = max_concurrency
        self.weight = weight
        self.in_flight = self._in_flight  # the load per weight again

    def observe_latency(self, seconds: float) -> None:
        self.ewma_s = seconds if self.ewma_s == 0.0 else (
            self.ewma_s + EWMA_ALPHA * (seconds - self.ewma_s)
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"Endpoint({self.name!r}, in_flight={self._in_flight}, {self.health.state})"


@dataclass(slots=True)
class Request:
    """What a policy may read of a request: the body, and its session key when there is one."""

    body: object
    session: str | None = None
    # prefix_affinity's block hashes, computed once per request (a retry reuses them)
    chain: tuple[int, ...] | None = field(default=None)
