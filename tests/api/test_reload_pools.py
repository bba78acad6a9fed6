"""Hot reload of a pooled channel's endpoints (api/reload_pools.py) in the app, against loopback
replicas: an added endpoint takes traffic, a removed one none; /healthz, /metrics and the
dashboard show the new set; the reload is logged and answered; other channel changes, and going
between base_url and endpoints, still need a restart."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

from hybrid_gateway.api.app import create_app
from hybrid_gateway.api.reload import differences
from hybrid_gateway.api.reload_pools import pool_reloadable, restart_reason
from hybrid_gateway.api.routes import RUNTIME
from hybrid_gateway.config import load_config, parse_config
from hybrid_gateway.dashboard.snapshot import take_snapshot
from tests.upstreams.pool.fakes import Replica, replicas

ADMIN_KEY = "admin-secret-for-pool-reload-tests"
Client = TestClient[Any, Any]


def config(urls: dict[str, str], **pool: Any) -> dict[str, Any]:
    endpoints = [{"url": url, "name": name} for name, url in urls.items()]
    return {
        "channels": {"pool": {"model": "m", "endpoints": endpoints,
                              "balancing": {"policy": "round_robin"}, **pool}},
        "lanes": {"light": {"channel": "pool"}},
        "models": [{"id": "light", "lane": "light"}],
        "routing": {"default_lane": "light"},
        "server": {"request_log": {"enabled": False}},
        "cache": {"exact": {"enabled": False}},
        "resilience": {"retry": {"enabled": False}},
    }  # fmt: skip


def write(path: Path, data: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.fixture
async def servers() -> AsyncIterator[list[Replica]]:
    async with replicas(3) as running:
        yield running


@pytest.fixture
async def client(
    servers: list[Replica], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Client]:
    monkeypatch.setenv("HYBRID_GATEWAY_ADMIN_KEY", ADMIN_KEY)
    path = tmp_path / "gateway.yaml"
    write(path, config({"r0": servers[0].url, "r1": servers[1].url}))
    async with TestClient(TestServer(create_app(load_config(path), config_path=path))) as c:
        yield c


async def ask(client: Client, n: int) -> None:
    for i in range(n):
        body = {"model": "light", "messages": [{"role": "user", "content": f"question {i}"}]}
        answer = await client.post("/v1/chat/completions", json=body)
        assert answer.status == 200, await answer.text()


async def reload(client: Client) -> tuple[int, dict[str, Any]]:
    answer = await client.post("/admin/reload", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    payload: dict[str, Any] = await answer.json()
    return answer.status, payload


async def test_endpoints_added_and_removed_by_a_reload_take_and_stop_taking_traffic(
    client: Client, servers: list[Replica], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    r0, r1, r2 = servers
    await ask(client, 4)
    assert (r0.chats, r1.chats, r2.chats) == (2, 2, 0)
    runtime = client.app[RUNTIME]
    kept = runtime.channels["pool"].endpoints[1]

    write(tmp_path / "gateway.yaml", config({"r1": r1.url, "r2": r2.url}))
    with caplog.at_level(logging.WARNING, "hybrid_gateway.api.reload"):
        status, payload = await reload(client)
    assert status == 200, payload
    assert payload["changed"] == ["channels"]
    assert payload["endpoints"] == [{"channel": "pool", "added": ["r2"], "removed": ["r0"],
                                     "retuned": [], "balancing": ""}]  # fmt: skip
    assert "channel pool endpoints reloaded: added r2; removed r0; in service: r1, r2" in (
        caplog.text
    )
    assert runtime.channels["pool"].endpoints[0] is kept
    await ask(client, 6)
    assert (r0.chats, r1.chats, r2.chats) == (2, 5, 3)

    health = await (await client.get("/healthz")).json()
    assert [e["name"] for e in health["endpoints"]["pool"]] == ["r1", "r2"]
    metrics = await (await client.get("/metrics")).text()
    assert 'endpoint="r0"' not in metrics
    assert 'hybrid_gateway_endpoint_up{channel="pool",endpoint="r2"} 1' in metrics
    snapshot = take_snapshot(runtime.metrics, uptime_s=1.0)
    assert [e.endpoint for e in snapshot.endpoints] == ["r1", "r2"]
    assert runtime.metrics.config_reloads.values[("ok",)] == 1


async def test_weights_and_balancing_knobs_reload(
    client: Client, servers: list[Replica], tmp_path: Path
) -> None:
    r0, r1, _ = servers
    urls = {"r0": r0.url, "r1": r1.url}
    data = config(urls)
    data["channels"]["pool"]["endpoints"][0]["weight"] = 3
    write(tmp_path / "gateway.yaml", data)
    status, payload = await reload(client)
    assert payload["endpoints"][0]["retuned"] == ["r0: weight 1 -> 3"]
    await ask(client, 8)
    assert (r0.chats, r1.chats) == (6, 2)
    data["channels"]["pool"]["balancing"] = {"policy": "least_outstanding"}
    write(tmp_path / "gateway.yaml", data)
    status, payload = await reload(client)
    assert status == 200 and payload["endpoints"][0]["balancing"] == "new least_outstanding"
    assert client.app[RUNTIME].channels["pool"].policy.name == "least_outstanding"


@pytest.mark.parametrize(
    ("change", "param", "reason"),
    [
        ({"health": {"consecutive_failures": 9}}, "channels.pool.health.consecutive_failures", ""),
        ({"model": "other"}, "channels.pool.model", ""),
        ({"max_concurrency": 3}, "channels.pool.max_concurrency", ""),
        (
            "base_url",
            "channels.pool.endpoints",
            " (going between base_url and endpoints is not reloaded)",
        ),
    ],
    ids=["health", "model", "channel-slots", "to-base-url"],
)
async def test_other_channel_changes_still_need_a_restart(
    client: Client, servers: list[Replica], tmp_path: Path, change: Any, param: str, reason: str
) -> None:
    data = config({"r0": servers[0].url, "r1": servers[1].url})
    if change == "base_url":
        pool = data["channels"]["pool"]
        del pool["endpoints"], pool["balancing"]
        pool["base_url"] = servers[0].url
    else:
        data["channels"]["pool"].update(change)
        data["channels"]["pool"]["endpoints"].append({"url": servers[2].url, "name": "r2"})
    write(tmp_path / "gateway.yaml", data)
    status, payload = await reload(client)
    assert status == 400 and payload["error"]["param"] == param
    assert f"a change to {param} needs a restart{reason}" in payload["error"]["message"]
    pool = client.app[RUNTIME].channels["pool"]
    assert [e.name for e in pool.endpoints] == ["r0", "r1"]


def test_going_either_way_between_base_url_and_endpoints_needs_a_restart() -> None:
    pooled = parse_config(config({"r0": "http://127.0.0.1:9/v1"}), "<test>")
    single_data = config({"r0": "http://127.0.0.1:9/v1"})
    pool = single_data["channels"]["pool"]
    del pool["endpoints"], pool["balancing"]
    pool["base_url"] = "http://127.0.0.1:9/v1"
    single = parse_config(single_data, "<test>")
    for old, new in ((pooled, single), (single, pooled)):
        paths = list(differences(old, new))
        assert ("channels", "pool", "endpoints") in paths
        assert not any(pool_reloadable(old, new, p) for p in paths)
        reason = restart_reason(old, new, ("channels", "pool", "endpoints"))
        assert reason == " (going between base_url and endpoints is not reloaded)"
    assert pool_reloadable(pooled, pooled, ("channels", "pool", "balancing", "policy"))
    assert not pool_reloadable(pooled, pooled, ("channels", "pool", "health", "active"))
