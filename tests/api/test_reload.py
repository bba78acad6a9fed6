"""Hot reload (api/reload.py): the router, the tenants and limits, the semantic cache's decision
are swapped; a bad or non-reloadable file is refused with nothing applied."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

from hybrid_gateway.api.app import create_app
from hybrid_gateway.api.reload import reload_runtime, reloadable
from hybrid_gateway.api.routes import RUNTIME
from hybrid_gateway.config import load_config
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.types import ChatRequest, RequestRecord, Usage

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


def chat_request(text: str) -> ChatRequest:
    messages = [{"role": "user", "content": text}]
    return ChatRequest("light", messages, False, False, {"model": "light", "messages": messages})


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


# -- tenants, limits and the semantic cache's decision ----------------------------------------
SLOW = {"requests_per_s": 0.001, "burst": 1}  # one request, then nothing for 1000 s


async def status_of(client: Client, text: str = "hello") -> int:
    body = {"model": "auto", "messages": [{"role": "user", "content": text}]}
    answer = await client.post("/v1/chat/completions", json=body)
    return answer.status


async def test_tenants_and_limits_reload_keeping_the_buckets(
    client: Client, tmp_path: Path
) -> None:
    data = config("alpha")
    write(tmp_path / "gateway.yaml", {**data, "tenants": {"default": {"rate": SLOW}}})
    assert (await reload(client))[0] == 200
    assert await status_of(client) == 502  # admitted (nothing listens upstream)
    assert await status_of(client) == 429
    fast = {"default": {"rate": {"requests_per_s": 1000, "burst": 2}}}
    write(tmp_path / "gateway.yaml", {**data, "tenants": fast, "limits": {"global": SLOW}})
    status, payload = await reload(client)
    assert status == 200 and sorted(payload["changed"]) == ["limits", "tenants"]
    assert await status_of(client) == 502  # the tenant's bucket refills at 1000/s now
    assert await status_of(client) == 429  # the new global bucket: full (1), then empty
    assert reloads(client, "ok") == 2


async def test_a_rejected_partial_change_leaves_everything_as_it_was(
    client: Client, tmp_path: Path
) -> None:
    data = {**config("alpha"), "tenants": {"default": {"rate": SLOW}}}
    write(tmp_path / "gateway.yaml", data)
    assert (await reload(client))[0] == 200
    runtime = client.app[RUNTIME]
    parts, before = runtime.tenancy.parts, runtime.config
    assert await status_of(client) == 502
    fast = {"default": {"rate": {"requests_per_s": 1000, "burst": 5}}}
    semantic = {"semantic": {"path": str(tmp_path / "elsewhere.sqlite3")}}
    write(tmp_path / "gateway.yaml", {**data, "tenants": fast, "cache": semantic})
    status, payload = await reload(client)
    assert status == 400 and payload["error"]["param"] == "cache.semantic.path"
    assert "cache.semantic.path needs a restart" in payload["error"]["message"]
    assert runtime.tenancy.parts is parts and runtime.config is before
    assert await status_of(client) == 429  # the old quota is still in force


def semantic_config(folder: Path, threshold: float) -> dict[str, Any]:
    data = config("alpha")
    semantic = {"enabled": True, "path": str(folder / "semantic.sqlite3"), "threshold": threshold}
    data["cache"] = {"exact": {"enabled": False}, "semantic": semantic}
    return data


async def test_a_threshold_change_turns_a_hit_into_a_miss_and_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYBRID_GATEWAY_ADMIN_KEY", ADMIN_KEY)
    path = tmp_path / "gateway.yaml"
    write(path, semantic_config(tmp_path, 0.98))
    async with TestClient(TestServer(create_app(load_config(path), config_path=path))) as client:
        runtime = client.app[RUNTIME]
        stage = runtime.semantic
        assert stage is not None
        asked = RequestRecord(request_id="req_1", started_at=0.0)
        stage.prepare(chat_request("信用卡怎么激活"), asked)
        await stage.store(asked, b'{"answer": 1}', Usage(5, 5))

        async def lookup() -> tuple[bool, float | None]:
            record = RequestRecord(request_id="req_2", started_at=0.0)
            stage.prepare(chat_request("信用卡如何激活？"), record)
            return await stage.lookup(record) is not None, record.similarity

        hit, similarity = await lookup()
        assert hit and similarity is not None and 0.98 <= similarity < 1.0
        write(path, semantic_config(tmp_path, (similarity + 1.0) / 2))
        status, payload = await reload(client)
        assert (status, payload["changed"]) == (200, ["cache.semantic"])
        assert await lookup() == (False, similarity)  # the entry stays; the decision moved
        write(path, semantic_config(tmp_path, 0.98))
        assert (await reload(client))[0] == 200
        assert (await lookup())[0]

        write(path, {**semantic_config(tmp_path, 0.98), "tenants": {"a": {"cache_scope": "s"}}})
        assert (await reload(client))[0] == 200
        assert stage.shared_scopes == {"a": "s"}
        bounds = semantic_config(tmp_path, 0.98)
        bounds["cache"]["semantic"]["max_entries"] = 10
        write(path, bounds)
        status, payload = await reload(client)
        assert (status, payload["error"]["param"]) == (400, "cache.semantic.max_entries")


def test_the_rerankers_rule_reloads_and_its_model_does_not() -> None:
    reranker = ("cache", "semantic", "reranker")
    assert reloadable((*reranker, "min_score")) and reloadable((*reranker, "cosine_weight"))
    assert not reloadable((*reranker, "path")) and not reloadable((*reranker, "kind"))
    assert not reloadable(reranker)  # a reranker added or removed: a restart
