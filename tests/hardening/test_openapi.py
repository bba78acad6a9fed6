"""``/openapi.json`` describes exactly the routes the app registers, in valid OpenAPI 3.1."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from hybrid_gateway.api.app import create_app
from hybrid_gateway.api.openapi import build_spec
from hybrid_gateway.api.schema import KNOWN_PARAMS
from hybrid_gateway.config import parse_config

_METHODS = {"get", "put", "post", "delete", "patch", "options", "head", "trace"}


def _app() -> web.Application:
    config = parse_config(
        {
            "channels": {"c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
            "lanes": {"light": {"channel": "c"}, "heavy": {"channel": "c"}},
            "server": {"request_log": {"enabled": False}},
        }
    )
    return create_app(config)


def _routes(app: web.Application) -> set[tuple[str, str]]:
    routes = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter") or info.get("prefix")
        # aiohttp adds HEAD for every GET by itself: not a route anyone registered.
        if route.method != "HEAD" and path:
            routes.add((route.method.lower(), str(path)))
    return routes


def _described(spec: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method, path)
        for path, item in spec["paths"].items()
        for method in item
        if method in _METHODS
    }


def test_every_route_is_described_and_every_description_is_a_route() -> None:
    routes, described = _routes(_app()), _described(build_spec())
    assert routes - described == set(), "routes without an entry in api/openapi/"
    assert described - routes == set(), "described endpoints the app does not serve"


def test_the_spec_is_valid_openapi_3_1() -> None:
    import jsonschema_rs
    import schemathesis
    from schemathesis.core.result import Err
    from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR

    spec = build_spec()
    OPENAPI_31_VALIDATOR.validate(spec)  # the official OpenAPI 3.1 document schema
    for schema in spec["components"]["schemas"].values():
        jsonschema_rs.meta.validate(schema)
    results = list(schemathesis.openapi.from_dict(spec).get_all_operations())
    assert [r.err() for r in results if isinstance(r, Err)] == []  # every $ref resolved
    assert len(results) == len(_described(spec))


def _resolve(spec: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        *_, kind, name = node["$ref"].split("/")
        node = spec["components"][kind][name]
    return node


def test_every_error_response_is_the_openai_error_object_with_a_request_id() -> None:
    spec = build_spec()
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if int(status) < 400:
                    continue
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/Error"}, (method, path, status)
                assert "x-request-id" in response["headers"], (method, path, status)


def test_chat_answers_document_the_decision_headers() -> None:
    spec = build_spec()
    ok = spec["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]
    assert set(ok["content"]) == {"application/json", "text/event-stream"}
    headers = set(ok["headers"])
    assert {"x-request-id", "x-gateway-route", "x-gateway-cache", "x-gateway-cost-usd"} <= headers
    for name in headers:
        assert name in spec["components"]["headers"]


def test_the_request_schema_lists_exactly_the_parameters_the_parser_knows() -> None:
    request = _resolve(
        build_spec(),
        build_spec()["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"][
            "application/json"
        ]["schema"],
    )
    assert set(request["properties"]) == KNOWN_PARAMS
    assert request["additionalProperties"] is False
    assert request["properties"]["temperature"] == {
        "type": ["number", "null"],
        "minimum": 0,
        "maximum": 2,
    }


async def test_the_app_serves_the_spec() -> None:
    async with TestClient(TestServer(_app())) as client:
        response = await client.get("/openapi.json")
        assert response.status == 200
        assert (await response.json()) == build_spec()
