"""``GET /v1/gateway/results/{request_id}`` in process: states, tenant isolation, auth."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from hybrid_gateway.api.app import create_app
from hybrid_gateway.api.routes import RUNTIME
from hybrid_gateway.config import parse_config
from hybrid_gateway.tenancy.keys import KeyStore


def settings(tmp_path: Path) -> dict[str, Any]:
    return {
        # Nothing listens there: these tests never reach an upstream.
        "channels": {"c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "lanes": {"light": {"channel": "c"},
                  "heavy": {"channel": "c", "deadline_s": 8, "fallback_lane": "light"}},
        "server": {"request_log": {"enabled": False}},
        "auth": {"enabled": True, "keys_path": str(tmp_path / "keys.sqlite3"),
                 "admin_key_env": None},
        "tenants": {"acme": {}, "globex": {}},
    }  # fmt: skip


async def test_only_the_requesting_tenant_sees_its_result_in_each_state(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path / "keys.sqlite3")
    acme = {"Authorization": f"Bearer {keys.create('acme', 'bot', 't', time.time()).key}"}
    globex = {"Authorization": f"Bearer {keys.create('globex', 'bot', 't', time.time()).key}"}
    keys.close()
    app = create_app(parse_config(settings(tmp_path)))
    async with TestClient(TestServer(app)) as client:
        store = client.app[RUNTIME].degradation.results
        store.open("req_1", "acme", "heavy")
        url = "/v1/gateway/results/req_1"

        assert (await client.get(url)).status == 401
        other = await client.get(url, headers=globex)
        assert other.status == 404
        error = (await other.json())["error"]
        assert (error["code"], error["param"]) == ("request_not_found", "request_id")
        assert error["request_id"] == other.headers["x-request-id"]
        assert (await client.get("/v1/gateway/results/req_none", headers=acme)).status == 404

        pending = await client.get(url, headers=acme)
        assert pending.status == 202 and pending.headers["x-gateway-deferred"] == "pending"
        assert await pending.json() == {
            "object": "gateway.deferred_result", "id": "req_1", "status": "pending"
        }  # fmt: skip

        store.finish("req_1", b'{"object": "chat.completion", "choices": []}')
        done = await client.get(url, headers=acme)
        assert done.status == 200 and done.headers["x-gateway-deferred"] == "done"
        assert (await done.json())["object"] == "chat.completion"

        store.open("req_2", "acme", "heavy")
        store.fail("req_2", 504, "upstream_timeout", "no answer within 60 s")
        failed = await client.get("/v1/gateway/results/req_2", headers=acme)
        assert failed.status == 504
        body = (await failed.json())["error"]
        assert (body["code"], body["request_id"]) == ("upstream_timeout", "req_2")
