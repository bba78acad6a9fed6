"""Endpoints for policy tests: real health objects on a manual clock, no network."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.upstreams.pool.endpoint import Endpoint
from hybrid_gateway.upstreams.pool.health import EndpointHealth


class Unreachable:
    """A client policies never call (they only choose)."""

    async def complete(self, body: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]]:
        raise AssertionError("a policy does not send")

    def open_stream(
        self, body: Mapping[str, Any]
    ) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        raise AssertionError("a policy does not send")

    async def aclose(self) -> None:
        pass

    def resize(self, max_concurrency: int) -> None:
        pass

    @property
    def idle_connections(self) -> int:
        return 0


def endpoints(n: int, clock: ManualClock, weights: list[float] | None = None) -> list[Endpoint]:
    out = []
    for i in range(n):
        health = EndpointHealth(clock, consecutive_failures=1, base_ejection_s=1.0,
                                max_ejection_s=30.0)  # fmt: skip
        out.append(Endpoint(
            index=i, name=f"e{i}", url=f"http://127.0.0.1:{9000 + i}/v1",
            weight=weights[i] if weights else 1.0, max_concurrency=64, client=Unreachable(),
            health=health,
        ))  # fmt: skip
    return out


def conversation(system: str, *turns: str) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}]
    for i, text in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return {"model": "m", "messages": messages}
