"""Hot reload (api/reload.py): the router is swapped, a bad or non-reloadable file is refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

from hybrid_gateway.api.app import create_app
from hybrid_gateway.api.reload import reload_runtime
from hybrid_gateway.api.routes import RUNTIME
from hybrid_gateway.config import load_config
from hybrid_gateway.errors import ConfigError

ADMIN_KEY = "admin-secret-for-reload-tests"
Client = TestClient[Any, Any]


def config(keyword: str, *, port: int = 9) -> dict[str, Any]:
    """Rules only; nothing listens at the channels (a request ends 502, routed all the same)."""
    return {
        "channels": {
            "light-c": {"base_url": f"http://127.0.0.1:{port}/v1", "model": "m"},
            "heavy-c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"},
        },
        "lanes": {"light": {"channel": "light-c"}, "heavy": {"channel": "heavy-c"}},
        "server": {"request_log": {"enabled": False}},
        "resilience": {"retry": {"enabled": False}},
        "routing": {
            "default_lane": "heavy",
            "rules": [{"name": f"kw-{keyword}", "when": {"keywords_any": [keyword]},
                       "lane": "light"}],
        },
    }  # fmt: skip


def write(path: Path, data: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.fixture
async def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Client]:
    monkeypatch.setenv("HYBRID_GATEWAY_ADMIN_KEY", ADMIN_KEY)
    path = tmp_path / "gateway.yaml"
    write(path, config("alpha"))
    app = create_app(load_config(path), config_path=path)
    async with TestClient(TestServer(app)) as running:
        yield running


async def route(client: Client, text: str) -> str:
    body = {"model": "auto", "messages": [{"role": "user", "content": text}]}
    answer = await client.post("/v1/chat/completions", json=body)
    return answer.headers["x-gateway-route"]


async def reload(client: Client) -> tuple[int, dict[str, Any]]:
    answer = await client.post("/admin/reload", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    payload: dict[str, Any] = await answer.json()
    return answer.status, payload


def reloads(client: Client, outcome: str) -> float:
    return float(client.app[RUNTIME].metrics.config_reloads.values.get((outcome,), 0.0))


async def test_a_changed_rule_takes_effect_on_reload(client: Client, tmp_path: Path) -> None:
    assert "rule=kw-alpha" in await route(client, "alpha question")
    write(tmp_path / "gateway.yaml", config("beta"))
    status, payload = await reload(client)
    assert status == 200, payload
    assert payload["changed"] == ["routing"] and len(payload["sha256"]) == 64
    assert "rule=kw-beta" in await route(client, "beta question")
    assert "rule=default" in await route(client, "alpha question")
    assert reloads(client, "ok") == 1
    assert client.app[RUNTIME].config.routing.rules[0].name == "kw-beta"


async def test_an_unchanged_file_reloads_with_nothing_changed(client: Client) -> None:
    status, payload = await reload(client)
    assert (status, payload["changed"]) == (200, [])


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("routing: [unclosed\n", "valid YAML"),
        (yaml.safe_dump({**config("beta"), "lanes": {"light": {"channel": "nope"}}}), "lanes"),
        (yaml.safe_dump(config("beta", port=10)), "channels"),
    ],
    ids=["yaml", "invalid", "not-reloadable"],
)
async def test_a_bad_file_is_refused_and_routing_stays(
    client: Client, tmp_path: Path, text: str, field: str
) -> None:
    (tmp_path / "gateway.yaml").write_text(text)
    status, payload = await reload(client)
    assert status == 400
    error = payload["error"]
    assert error["code"] == "config_rejected"
    assert str(tmp_path / "gateway.yaml") in error["message"]
    assert field in error["message"]
    assert "rule=kw-alpha" in await route(client, "alpha question")
    assert reloads(client, "rejected") == 1 and reloads(client, "ok") == 0


async def test_reload_needs_the_admin_key(client: Client) -> None:
    answer = await client.post("/admin/reload", headers={"Authorization": "Bearer wrong"})
    assert answer.status == 401


async def test_the_swap_leaves_a_router_already_taken_in_use(
    client: Client, tmp_path: Path
) -> None:
    runtime = client.app[RUNTIME]
    before = runtime.pipeline._p.router  # what a request already past routing holds
    write(tmp_path / "gateway.yaml", config("beta"))
    reload_runtime(runtime, tmp_path / "gateway.yaml")
    after = runtime.pipeline._p.router
    assert after is not before
    assert [r.name for r in runtime.config.routing.rules] == ["kw-beta"]
    with pytest.raises(ConfigError):
        reload_runtime(runtime, tmp_path / "missing.yaml")
    assert runtime.pipeline._p.router is after
