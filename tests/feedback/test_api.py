"""The feedback endpoints in process: validation, tenant isolation, metrics, the journal race."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from hybrid_gateway.api.app import create_app
from hybrid_gateway.api.feedback import FEEDBACK_STORE
from hybrid_gateway.api.routes import RUNTIME
from hybrid_gateway.config import parse_config
from hybrid_gateway.tenancy.keys import KeyStore
from hybrid_gateway.types import CacheOutcome, RequestRecord, RouteDecision


def config(log_path: Path | None) -> dict[str, Any]:
    log: dict[str, Any] = (
        {"path": str(log_path), "flush_interval_ms": 60_000} if log_path else {"enabled": False}
    )
    return {
        # Nothing listens there: these tests never reach an upstream.
        "channels": {"c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "lanes": {"light": {"channel": "c"}, "heavy": {"channel": "c"}},
        "server": {"request_log": log},
    }


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[TestClient[Any, Any]]:
    app = create_app(parse_config(config(tmp_path / "requests.sqlite3")))
    async with TestClient(TestServer(app)) as test_client:
        yield test_client


def log_request(client: TestClient[Any, Any], request_id: str, tenant: str = "default") -> None:
    """A finished request, as the chat handler records it (journaled, not yet in SQLite)."""
    record = RequestRecord(
        request_id=request_id, started_at=time.time(), model="auto", tenant=tenant,
        route=RouteDecision("heavy", "c", "default"), cache=CacheOutcome.MISS,
    )  # fmt: skip
    client.app[RUNTIME].record_done(record)


async def test_rate_then_read_back(client: TestClient[Any, Any]) -> None:
    log_request(client, "req_a")
    body = {"request_id": "req_a", "rating": "down", "reason": "wrong", "comment": "42 is wrong"}
    response = await client.post("/v1/feedback", json=body)
    assert response.status == 200
    assert response.headers["x-request-id"].startswith("req_")
    saved = await response.json()
    assert saved["object"] == "feedback"
    assert (saved["rating"], saved["reason"], saved["comment"]) == ("down", "wrong", "42 is wrong")
    assert saved["request"] == {"model": "auto", "lane": "heavy", "channel": "c",
                                "rule": "default", "cache": "miss", "status": 200}  # fmt: skip
    read = await client.get("/v1/feedback/req_a")
    assert read.status == 200 and await read.json() == saved


async def test_feedback_is_counted_in_metrics(client: TestClient[Any, Any]) -> None:
    log_request(client, "req_m")
    await client.post("/v1/feedback", json={"request_id": "req_m", "rating": "up"})
    text = await (await client.get("/metrics")).text()
    assert (
        'hybrid_gateway_feedback_total{lane="heavy",cache="miss",rating="up",reason="none"} 1.0'
        in text
    )


async def test_another_tenants_request_is_not_found(client: TestClient[Any, Any]) -> None:
    log_request(client, "req_other", tenant="acme")
    response = await client.post("/v1/feedback", json={"request_id": "req_other", "rating": "up"})
    assert response.status == 404
    error = (await response.json())["error"]
    assert (error["code"], error["param"]) == ("request_not_found", "request_id")
    assert error["request_id"] == response.headers["x-request-id"]
    assert (await client.get("/v1/feedback/req_other")).status == 404


@pytest.mark.parametrize(
    ("request_id", "code"),
    [("req_never", "request_not_found"), ("req_unrated", "feedback_not_found")],
)
async def test_unknown_ids_are_404(
    client: TestClient[Any, Any], request_id: str, code: str
) -> None:
    log_request(client, "req_unrated")
    response = await client.get(f"/v1/feedback/{request_id}")
    assert response.status == 404
    assert (await response.json())["error"]["code"] == code
    posted = await client.post("/v1/feedback", json={"request_id": "req_never", "rating": "up"})
    assert posted.status == 404


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"{not json", "invalid_json"),
        (b"[1, 2]", "invalid_json"),
        (b'{"request_id": "req_a", "rating": "sideways"}', "invalid_value"),
        (b'{"request_id": "req_a"}', "missing_required_parameter"),
    ],
)
async def test_bad_bodies_are_400_with_the_request_id(
    client: TestClient[Any, Any], raw: bytes, code: str
) -> None:
    response = await client.post(
        "/v1/feedback", data=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status == 400
    error = (await response.json())["error"]
    assert error["code"] == code and error["request_id"].startswith("req_")


async def test_an_oversized_body_is_413(client: TestClient[Any, Any]) -> None:
    body = {"request_id": "req_a", "rating": "up", "comment": "x" * 20_000}
    response = await client.post("/v1/feedback", json=body)
    assert response.status == 413
    assert (await response.json())["error"]["code"] == "request_too_large"


async def test_without_a_request_log_there_is_nothing_to_rate() -> None:
    app = create_app(parse_config(config(None)))
    async with TestClient(TestServer(app)) as client:
        response = await client.post("/v1/feedback", json={"request_id": "req_a", "rating": "up"})
        assert response.status == 404
        assert "request_log" in (await response.json())["error"]["message"]


async def test_with_api_keys_only_the_requesting_tenant_may_rate(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path / "keys.sqlite3")
    acme = keys.create("acme", "support-bot", "test", now=time.time()).key
    globex = keys.create("globex", "default", "test", now=time.time()).key
    keys.close()
    settings = config(tmp_path / "requests.sqlite3") | {
        "auth": {"enabled": True, "keys_path": str(tmp_path / "keys.sqlite3"),
                 "admin_key_env": None},
        "tenants": {"acme": {}, "globex": {}},
    }  # fmt: skip
    app = create_app(parse_config(settings))
    async with TestClient(TestServer(app)) as client:
        log_request(client, "req_acme", tenant="acme")
        body = {"request_id": "req_acme", "rating": "down", "reason": "wrong"}

        def auth(key: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {key}"}

        anonymous = await client.post("/v1/feedback", json=body)
        assert anonymous.status == 401
        other = await client.post("/v1/feedback", json=body, headers=auth(globex))
        assert other.status == 404
        assert (await other.json())["error"]["code"] == "request_not_found"
        own = await client.post("/v1/feedback", json=body, headers=auth(acme))
        assert own.status == 200
        assert (await client.get("/v1/feedback/req_acme", headers=auth(globex))).status == 404
        read = await client.get("/v1/feedback/req_acme", headers=auth(acme))
        assert read.status == 200 and (await read.json())["reason"] == "wrong"


async def test_a_store_failure_is_an_openai_style_500(client: TestClient[Any, Any]) -> None:
    await client.app[FEEDBACK_STORE].aclose()  # the database is gone: every query raises
    response = await client.post("/v1/feedback", json={"request_id": "req_a", "rating": "up"})
    assert response.status == 500
    error = (await response.json())["error"]
    assert error["code"] == "internal_error" and "Traceback" not in error["message"]
    assert error["request_id"] == response.headers["x-request-id"]


async def test_a_chunked_body_over_the_server_limit_is_413(client: TestClient[Any, Any]) -> None:
    """No Content-Length: aiohttp stops reading at the server's limit; still a 413, not a 500."""

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"request_id": "req_a", "rating": "up", "comment": "'
        for _ in range(40):
            yield b"x" * 65536  # 2.5 MiB in all: past the server's max_body_bytes
        yield b'"}'

    response = await client.post("/v1/feedback", data=chunks(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    assert response.status == 413
    error = (await response.json())["error"]
    assert error["code"] == "request_too_large" and error["request_id"].startswith("req_")
