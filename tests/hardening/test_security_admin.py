"""Security review, the admin API: every admin operation (keys and semantic cache) refuses a
caller without the admin key, with a wrong one or with a tenant's API key (401), and the whole
admin API is off (403) while the admin key's environment variable is unset or empty.

The operations come from ``/openapi.json`` (every path under ``/admin``), so an admin endpoint
added later is covered once it is described, and test_openapi.py fails until it is.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
import schemathesis
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from hybrid_gateway.api.app import create_app
from hybrid_gateway.api.openapi import build_spec
from hybrid_gateway.config import parse_config
from tests.hardening.security_stack import Secure, call, chat, is_openai_error, secret_part
from tests.hardening.test_fuzz_api import _EXCLUDED, check_answer

PATH_VALUES = {"{key_id}": "000000000000", "{entry_id}": "1", "{tenant}": "acme"}
BODIES: dict[str, Any] = {"POST /admin/keys": {"tenant": "acme"},
                          "PUT /admin/cache/semantic/entries/1": {"content": "pwned"},
                          "POST /admin/cache/semantic/search": {"request": {}}}  # fmt: skip


def _admin_paths() -> list[tuple[str, str]]:
    """(METHOD, path template) of every described admin operation."""
    return sorted(
        (method.upper(), path)
        for path, item in build_spec()["paths"].items()
        if path.startswith("/admin")
        for method in item
    )


def _admin_operations() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for method, template in _admin_paths():
        path = template
        for name, value in PATH_VALUES.items():
            path = path.replace(name, value)
        out.append((method, path))
    return out


ADMIN_OPERATIONS = _admin_operations()


def test_the_semantic_cache_admin_is_described_and_mounted(secure: Secure) -> None:
    assert ("GET", "/admin/cache/semantic") in ADMIN_OPERATIONS
    assert ("DELETE", "/admin/cache/semantic/tenants/acme") in ADMIN_OPERATIONS
    stats = call(secure.url + "/admin/cache/semantic", token=secure.admin_key)
    assert stats.status == 200 and "entries" in stats.json()


@pytest.mark.parametrize(("method", "path"), ADMIN_OPERATIONS)
def test_without_the_admin_key_every_admin_operation_is_401(
    secure: Secure, method: str, path: str
) -> None:
    keys_before = call(secure.url + "/admin/keys", token=secure.admin_key).json()["data"]
    body = BODIES.get(f"{method} {path}")
    admin = secure.admin_key
    attempts: list[dict[str, str]] = [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {secure.keys['acme']}"},  # a tenant key is no admin key
        {"Authorization": f"Bearer {admin}x"},
        {"Authorization": f"Bearer {admin[:-1]}"},
        {"Authorization": f"Basic {admin}"},
        {"Authorization": admin},
        {"X-Api-Key": admin},
    ]
    for headers in attempts:
        answer = call(secure.url + path, method, body, headers=headers)
        assert is_openai_error(answer, 401, "invalid_admin_key"), (headers, answer.body)
        for secret in (admin, secure.keys["acme"], secret_part(secure.keys["acme"])):
            assert secret.encode() not in answer.body
    assert call(secure.url + "/admin/keys", token=admin).json()["data"] == keys_before


def _config(admin_key_env: str | None) -> dict[str, Any]:
    return {
        "channels": {"c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "lanes": {"light": {"channel": "c"}, "heavy": {"channel": "c"}},
        "server": {"request_log": {"enabled": False}},
        "auth": {"admin_key_env": admin_key_env},
    }


@pytest.fixture(params=["unset", "empty", "no-variable-named"])
async def adminless(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[TestClient[Any, Any]]:
    """A real gateway app on loopback whose admin key is missing in each possible way."""
    env = "HGW_SEC_ADMINLESS_KEY"
    monkeypatch.delenv(env, raising=False)
    if request.param == "empty":
        monkeypatch.setenv(env, "")
    config = parse_config(_config(None if request.param == "no-variable-named" else env))
    async with TestClient(TestServer(create_app(config))) as client:
        yield client


async def test_with_the_admin_key_unset_every_admin_operation_is_403(
    adminless: TestClient[Any, Any],
) -> None:
    for method, path in ADMIN_OPERATIONS:
        for headers in ({}, {"Authorization": "Bearer "}, {"Authorization": "Bearer anything"}):
            response = await adminless.request(
                method, path, json=BODIES.get(f"{method} {path}"), headers=headers
            )
            error = (await response.json())["error"]
            assert response.status == 403, (method, path, headers)
            assert error["code"] == "admin_api_disabled"
            assert error["request_id"] == response.headers["x-request-id"]


def test_an_entry_id_past_sqlite_integers_is_400_not_500(secure: Secure) -> None:
    """Found by the fuzz below: 2^63 reached SQLite, and "²" (a digit to ``str.isdigit``)
    reached ``int()``; both came back as aiohttp's text 500."""
    for entry_id, method in itertools.product((str(2**63), "%C2%B2"), ("GET", "PUT", "DELETE")):
        answer = call(f"{secure.url}/admin/cache/semantic/entries/{entry_id}", method,
                      {"content": "x"}, token=secure.admin_key)  # fmt: skip
        assert is_openai_error(answer, 400, "invalid_value"), answer.body


@pytest.mark.parametrize(("method", "path"), sorted({
    (m, p) for m, p in _admin_paths() if p.startswith("/admin/cache")}))  # fmt: skip
def test_fuzz_the_semantic_cache_admin_with_the_cache_on(
    secure: Secure, method: str, path: str
) -> None:
    """The main fuzz gateway runs without the semantic cache (these answer 404 there); here
    the operations run for real, on a cache holding an entry."""
    assert chat(secure, "acme", "开户需要带什么证件").status == 200
    operation = schemathesis.openapi.from_url(secure.url + "/openapi.json")[path][method]
    headers = {"Authorization": f"Bearer {secure.admin_key}"}

    @settings(max_examples=40, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(operation.as_strategy(GenerationMode.POSITIVE)
           | operation.as_strategy(GenerationMode.NEGATIVE))  # fmt: skip
    def run(case: schemathesis.Case[Any]) -> None:
        response = case.call(base_url=secure.url, headers=headers, timeout=15)
        check_answer(response)
        case.validate_response(response, excluded_checks=_EXCLUDED, headers=headers)

    run()
