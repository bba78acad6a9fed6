"""routing.classifier.cascade in a running gateway: the shipped classifier and its shipped static
student on the bundled embedders; the decision shows in x-gateway-route; a reload moves the
margin, and one that would turn the cascade on is refused (the static embedder is built at
start-up)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

from hybrid_gateway.api.app import create_app
from hybrid_gateway.config import load_config

ADMIN_KEY = "admin-secret-for-cascade-tests"
Client = TestClient[Any, Any]
QUESTION = "What is the capital of France?"


def config(cascade: dict[str, Any] | None) -> dict[str, Any]:
    """No upstream listens (a request ends 502, routed all the same)."""
    classifier: dict[str, Any] = {"model": "default", "threshold": 0.5}
    if cascade is not None:
        classifier["cascade"] = cascade
    return {
        "channels": {
            "light-c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"},
            "heavy-c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"},
        },
        "lanes": {"light": {"channel": "light-c"}, "heavy": {"channel": "heavy-c"}},
        "server": {"request_log": {"enabled": False}},
        "resilience": {"retry": {"enabled": False}},
        "routing": {"default_lane": "heavy", "classifier": classifier},
    }


async def started(tmp_path: Path, cascade: dict[str, Any] | None) -> Client:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config(cascade)))
    client = TestClient(TestServer(create_app(load_config(path), config_path=path)))
    await client.start_server()
    return client


@pytest.fixture
async def admin(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    monkeypatch.setenv("HYBRID_GATEWAY_ADMIN_KEY", ADMIN_KEY)
    yield


async def route(client: Client, text: str = QUESTION) -> str:
    body = {"model": "auto", "messages": [{"role": "user", "content": text}]}
    answer = await client.post("/v1/chat/completions", json=body)
    return answer.headers["x-gateway-route"]


async def reload(client: Client, path: Path, cascade: dict[str, Any] | None) -> Any:
    path.write_text(yaml.safe_dump(config(cascade)))
    answer = await client.post("/admin/reload", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    return answer.status, await answer.json()


async def test_the_student_decides_and_a_reload_moves_the_margin(
    tmp_path: Path, admin: None
) -> None:
    client = await started(tmp_path, {"model": "default", "margin": 0})
    try:
        assert "rule=classifier:static; score=" in await route(client)
        status, payload = await reload(client, tmp_path / "gateway.yaml", {"margin": 20})
        assert (status, payload["changed"]) == (200, ["routing"])
        header = await route(client, QUESTION + " And of Spain?")
        assert "rule=classifier; score=" in header  # 20 logits: e5's classifier decides
    finally:
        await client.close()


async def test_turning_the_cascade_on_needs_a_restart(tmp_path: Path, admin: None) -> None:
    client = await started(tmp_path, None)
    try:
        assert "rule=classifier; score=" in await route(client)
        status, payload = await reload(client, tmp_path / "gateway.yaml", {"margin": 1})
        assert status == 400
        assert "routing.classifier.cascade" in payload["error"]["message"]
        assert "restart" in payload["error"]["message"]
        assert "rule=classifier; score=" in await route(client)
    finally:
        await client.close()
