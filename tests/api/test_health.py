"""``/healthz`` names a channel whose breaker is open or whose last N requests failed (and still
answers 200); ``/readyz`` is 503 while starting and draining, 200 in between."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

from hybrid_gateway.api.app import create_app
from hybrid_gateway.api.health import Lifecycle, Phase
from hybrid_gateway.api.routes import RUNTIME
from hybrid_gateway.config import parse_config
from hybrid_gateway.embedding.base import Vector
from hybrid_gateway.tools.emulator import LIGHT, create_emulator_app
from tests.e2e.stack import closed_port

Client = TestClient[Any, Any]


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    """A real emulator on loopback, answering at once."""
    server = TestServer(create_emulator_app(replace(LIGHT, zero_delay=True)))
    await server.start_server()
    try:
        yield str(server.make_url("/v1"))
    finally:
        await server.close()


def config(upstream: str, breaker: dict[str, Any]) -> dict[str, Any]:
    dead = f"http://127.0.0.1:{closed_port()}/v1"
    return {
        "channels": {
            "good": {"base_url": upstream, "model": "light-model"},
            "dead": {"base_url": dead, "model": "m", "connect_timeout_s": 1},
            # fails its first 3 requests (the emulator's directive), then answers
            "flaky": {"base_url": upstream, "model": "m@fail-first=3@status=502"},
        },
        "lanes": {
            "light": {"channel": "good"},
            "heavy": {"channel": "dead"},
            "flaky": {"channel": "flaky"},
        },
        "models": [
            {"id": "light", "lane": "light"},
            {"id": "heavy", "lane": "heavy"},
            {"id": "flaky", "lane": "flaky"},
        ],
        "server": {"request_log": {"enabled": False}, "health": {"failed_requests": 3}},
        "resilience": {"retry": {"enabled": False}, "breaker": breaker},
    }


async def gateway(config_tree: dict[str, Any]) -> Client:
    client = TestClient(TestServer(create_app(parse_config(config_tree))))
    await client.start_server()
    return client


async def ask(client: Client, model: str) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}]}
    return (await client.post("/v1/chat/completions", json=body)).status


async def health(client: Client) -> dict[str, Any]:
    answer = await client.get("/healthz")
    assert answer.status == 200  # degraded is still up
    body: dict[str, Any] = await answer.json()
    return body


async def test_an_open_breaker_makes_health_degraded_and_names_the_channel(
    upstream: str, caplog: pytest.LogCaptureFixture
) -> None:
    breaker = {"min_requests": 2, "error_rate": 0.5, "open_s": 30}
    client = await gateway(config(upstream, breaker))
    try:
        assert (await health(client))["status"] == "ok"
        with caplog.at_level(logging.INFO, logger="hybrid_gateway.request"):
            assert [await ask(client, "heavy") for _ in range(3)] == [502, 502, 503]
        body = await health(client)
        assert body["status"] == "degraded"
        assert {"channel": "dead", "problem": "breaker_open"} in body["problems"]
        assert all(p["channel"] == "dead" for p in body["problems"])
    finally:
        await client.close()
    # the transition is a WARNING of its own; each request an ERROR line (5xx)
    events = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert events == [("ERROR", "request"), ("WARNING", "breaker"), ("ERROR", "request"),
                      ("ERROR", "request")]  # fmt: skip
    transition = next(r for r in caplog.records if r.getMessage() == "breaker")
    assert transition.__dict__["fields"] == {"channel": "dead", "old": "closed", "new": "open"}


async def test_a_channel_failing_its_last_n_requests_is_named_until_it_answers(
    upstream: str,
) -> None:
    client = await gateway(config(upstream, {"enabled": False}))
    try:
        assert [await ask(client, "flaky") for _ in range(2)] == [502, 502]
        assert (await health(client))["status"] == "ok"  # 2 of 3
        assert await ask(client, "light") == 200  # another channel: counts apart
        assert await ask(client, "flaky") == 502
        body = await health(client)
        assert body["status"] == "degraded"
        failing = {"channel": "flaky", "problem": "failing", "consecutive_failures": 3}
        assert body["problems"] == [failing]
        assert await ask(client, "flaky") == 200  # it answers again
        assert await health(client) | {"uptime_s": 0} == body | {"status": "ok", "problems": [],
                                                                 "uptime_s": 0}  # fmt: skip
    finally:
        await client.close()


async def test_readyz_is_503_while_starting_and_draining(upstream: str) -> None:
    client = await gateway(config(upstream, {"enabled": False}))
    try:
        lifecycle = client.app[RUNTIME].lifecycle
        assert await readyz(client) == (503, "starting")
        lifecycle.ready()
        assert await readyz(client) == (200, "ready")
        lifecycle.drain()
        assert await readyz(client) == (503, "draining")
    finally:
        await client.close()


async def readyz(client: Client) -> tuple[int, str]:
    answer = await client.get("/readyz")
    body = await answer.json()
    if answer.status == 200:
        return 200, body["status"]
    assert body["error"]["request_id"] == answer.headers["x-request-id"]
    return answer.status, body["error"]["code"]


class _HeldEmbedder:
    """An embedder whose first answer waits until the test lets it go."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    @property
    def namespace(self) -> str:
        return "held@1"

    async def embed_one(self, text: str) -> Vector:
        await self.release.wait()
        return np.full(4, 0.5, dtype=np.float32)


async def test_ready_once_the_embedder_has_answered() -> None:
    lifecycle, embedder = Lifecycle(), _HeldEmbedder()
    lifecycle.begin(embedder)
    await asyncio.sleep(0)
    phases = [lifecycle.phase]
    embedder.release.set()
    for _ in range(10):
        await asyncio.sleep(0)
    phases.append(lifecycle.phase)
    assert phases == [Phase.STARTING, Phase.READY]
    without = Lifecycle()
    without.begin(None)  # no embedder: ready at once
    assert without.phase is Phase.READY
