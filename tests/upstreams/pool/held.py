"""Pools whose endpoints answer when the test lets them (no network), for reload tests.

Each endpoint's client (``Held``) parks every request until ``release`` and checks, the moment
the pool sends, that its endpoint is in service: in the pool's set, not retired, not ejected.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

from hybrid_gateway.config import ChannelConfig
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.upstreams.pool.build import build_pool
from hybrid_gateway.upstreams.pool.endpoint import Endpoint
from hybrid_gateway.upstreams.pool.health import HealthState
from hybrid_gateway.upstreams.pool.maker import EndpointMaker
from hybrid_gateway.upstreams.pool.pool import EndpointListener, EndpointPool
from hybrid_gateway.upstreams.pool.settings import EndpointConfig

ANSWER: dict[str, Any] = {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}


class Held:
    def __init__(self, endpoint: Endpoint, pool: list[EndpointPool]) -> None:
        self.endpoint, self._pool = endpoint, pool
        self.waiting: list[asyncio.Future[None]] = []
        self.sent = 0
        self.closed = False
        self.slots = endpoint.max_concurrency

    async def complete(self, body: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]]:
        pool = self._pool[0]
        assert self.endpoint in pool.endpoints and not self.endpoint.retired, self.endpoint
        assert self.endpoint.health.state is not HealthState.EJECTED, self.endpoint
        assert not self.closed
        self.sent += 1
        done = asyncio.get_running_loop().create_future()
        self.waiting.append(done)
        await done
        return b"{}", ANSWER

    def open_stream(
        self, body: Mapping[str, Any]
    ) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        raise AssertionError("no streams here")

    def release(self, n: int | None = None) -> int:
        """Let ``n`` (all) parked requests answer; how many were released."""
        out = self.waiting[:n] if n is not None else self.waiting
        self.waiting = self.waiting[len(out) :]
        for done in out:
            done.set_result(None)
        return len(out)

    async def aclose(self) -> None:
        self.closed = True

    def resize(self, max_concurrency: int) -> None:
        self.slots = max_concurrency

    @property
    def idle_connections(self) -> int:
        return 0


class HeldMaker(EndpointMaker):
    """The pool's maker, giving new endpoints ``Held`` clients."""

    __slots__ = ("pool_ref",)
    pool_ref: list[EndpointPool]

    def endpoint(
        self, config: ChannelConfig, index: int, spec: EndpointConfig, name: str
    ) -> Endpoint:
        endpoint = EndpointMaker.endpoint(self, config, index, spec, name)
        endpoint.client = Held(endpoint, self.pool_ref)
        return endpoint


def channel(endpoints: list[dict[str, Any]], **balancing: Any) -> ChannelConfig:
    """A pooled channel: ``endpoints`` as the file lists them (name -> url on port 9000+i)."""
    return ChannelConfig.model_validate({
        "model": "m", "max_concurrency": 64, "endpoints": endpoints,
        "balancing": {"policy": "round_robin", **balancing},
        "health": {"consecutive_failures": 1, "base_ejection_s": 1.0},
    })  # fmt: skip


def spec(name: str, **extra: Any) -> dict[str, Any]:
    return {"url": f"http://127.0.0.1:{9000 + int(name.lstrip('e'))}/v1", "name": name, **extra}


def held_pool(
    config: ChannelConfig,
    clock: ManualClock,
    listeners: list[EndpointListener] | None = None,
    seed: int = 1,
) -> EndpointPool:
    ref: list[EndpointPool] = []
    pool = build_pool("c", config, api_key=None, ca_file=None, clock=clock,
                      listeners=listeners or [], rng=random.Random(seed))  # fmt: skip
    ref.append(pool)
    maker = HeldMaker("c", None, None, clock, random.Random(seed))
    object.__setattr__(maker, "pool_ref", ref)
    pool.maker = maker
    for endpoint in pool.endpoints:
        endpoint.client = Held(endpoint, ref)
    return pool


def held(endpoint: Endpoint) -> Held:
    client = endpoint.client
    assert isinstance(client, Held)
    return client
