"""Deeply nested bodies through the real HTTP server: past ``MAX_DEPTH`` a 400 naming where,
never a 500 (orjson reads 1024 levels but writes 255, and the request key is written)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from hybrid_gateway.api.app import create_app
from hybrid_gateway.api.schema import MAX_DEPTH
from hybrid_gateway.config import parse_config

Client = TestClient[Any, Any]
USER = [{"role": "user", "content": "Fill in the form"}]


DEEP = "@deep@"  # stands in for a value nested deeper than orjson writes


def levels(count: int) -> Any:
    """A value that is ``count`` levels of objects and arrays deep."""
    value: Any = "leaf"
    for i in range(count):
        value = {"properties": value} if i % 2 else [value]
    return value


def deep_json(count: int) -> bytes:
    """``levels(count)`` as JSON text, written by hand: orjson stops at 255 levels."""
    opening = b"".join(b'{"properties":' if i % 2 else b"[" for i in reversed(range(count)))
    closing = b"".join(b"}" if i % 2 else b"]" for i in range(count))
    return opening + b'"leaf"' + closing


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    """Nothing listens at the channel: a request that passes validation ends 502."""
    config = parse_config({
        "channels": {"c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "lanes": {"light": {"channel": "c"}, "heavy": {"channel": "c"}},
        "server": {"request_log": {"enabled": False}},
        "resilience": {"retry": {"enabled": False}},
    })  # fmt: skip
    async with TestClient(TestServer(create_app(config))) as running:
        yield running


@pytest.mark.parametrize(
    ("body", "param", "depth"),
    [({"response_format": {"type": "json_schema", "json_schema": {"schema": DEEP}}},
      "response_format", 300),
     ({"tools": [{"type": "function", "function": {"name": "f", "parameters": DEEP}}]},
      "tools[0]", 300),
     ({"metadata": {"k": DEEP}}, "metadata", 1000),  # near what orjson reads (1024)
     ({"messages": [{"role": "user", "content": "x", "name": DEEP}]}, "messages[0]", 100)],
    ids=["response_format", "tools", "metadata", "messages"],
)  # fmt: skip
async def test_a_body_nested_too_deep_is_a_400_naming_where(
    client: Client, body: dict[str, Any], param: str, depth: int
) -> None:
    raw = orjson.dumps({"model": "auto", "messages": USER, **body})
    raw = raw.replace(orjson.dumps(DEEP), deep_json(depth))
    response = await client.post("/v1/chat/completions", data=raw,
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    payload = await response.json()
    assert response.status == 400, payload
    error = payload["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error", "invalid_value", param,
    )  # fmt: skip
    assert error["request_id"] == response.headers["x-request-id"]
    assert str(MAX_DEPTH) in error["message"]


async def test_a_body_at_the_limit_is_served(client: Client) -> None:
    # the body, response_format, json_schema, then the schema: MAX_DEPTH levels in all
    schema = {
        "type": "json_schema",
        "json_schema": {"name": "deep", "schema": levels(MAX_DEPTH - 3)},
    }
    for _ in range(2):  # the second one looks up the exact cache with the same key
        response = await client.post("/v1/chat/completions",
                                     json={"model": "auto", "messages": USER,
                                           "response_format": schema})  # fmt: skip
        payload = await response.json()
        assert response.status == 502, payload  # passed validation, reached the (absent) upstream
        assert payload["error"]["code"] != "internal_error"
