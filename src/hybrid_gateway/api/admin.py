"""Admin endpoints: API keys over HTTP, behind the admin key.

    POST   /admin/keys        {"tenant": T, "app": A?, "name": N?} -> 201, the key shown once
    GET    /admin/keys        {"object": "list", "data": [key without secret, ...]}
    DELETE /admin/keys/{id}   revoke (idempotent) -> the key's listing entry; 404 if unknown

``admin_only`` wraps a handler with the admin-key check (``tenancy/auth.py`` ``AdminGuard``):
403 ``admin_api_disabled`` while the environment variable named by ``auth.admin_key_env`` is
unset, 401 ``invalid_admin_key`` for a missing or wrong key.  Other admin handlers reuse it.
Errors are OpenAI-shaped with a request id, like everywhere else.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from hybrid_gateway.api.error_mapping import error_response
from hybrid_gateway.api.routes import RUNTIME
from hybrid_gateway.errors import InvalidRequest, RequestError
from hybrid_gateway.tenancy.keys import KeyStore
from hybrid_gateway.tenancy.settings import DEFAULT_APP, tenant_names

__all__ = ["add_admin_routes", "admin_only"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _KeyNotFound(RequestError):
    status = 404
    code = "key_not_found"


def admin_only(handler: Handler) -> Handler:
    """Run ``handler`` only for a caller holding the admin key; any error -> OpenAI JSON."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        runtime = request.app[RUNTIME]
        rid = runtime.ids.new()
        try:
            runtime.tenancy.parts.admin.check(request.headers.get("Authorization"))
            return await handler(request)
        except Exception as exc:  # a bug too: an OpenAI-style 500, the traceback in the log
            return error_response(exc, rid)

    return guarded


def _store(request: web.Request) -> KeyStore:
    keys = request.app[RUNTIME].tenancy.parts.keys
    if keys is None:  # the guard passed, so the admin key is set, so the store is open
        raise RuntimeError("key store not open")
    return keys


async def _create_key(request: web.Request) -> web.StreamResponse:
    runtime = request.app[RUNTIME]
    body = await json_object(request)
    tenant = _text(body, "tenant", None)
    known = tenant_names(runtime.config.tenants)
    if tenant not in known:
        raise InvalidRequest(
            f"'tenant' must be a tenant in the config (one of: {', '.join(sorted(known))}).",
            param="tenant",
            code="invalid_value",
        )
    app = _text(body, "app", DEFAULT_APP)
    name = _text(body, "name", "")
    new = _store(request).create(tenant, app, name, runtime.tenancy.parts.wall())
    payload = {**new.record.public(), "key": new.key}
    return web.json_response(payload, status=201, dumps=_dumps)


async def _list_keys(request: web.Request) -> web.StreamResponse:
    data = [k.public() for k in _store(request).list()]
    return web.json_response({"object": "list", "data": data}, dumps=_dumps)


async def _revoke_key(request: web.Request) -> web.StreamResponse:
    runtime = request.app[RUNTIME]
    key_id = request.match_info["key_id"]
    record = _store(request).revoke(key_id, runtime.tenancy.parts.wall())
    if record is None:
        raise _KeyNotFound(f"No API key with id '{key_id}'.", param="id")
    authenticator = runtime.tenancy.parts.authenticator
    if authenticator is not None:
        authenticator.invalidate(key_id)
    return web.json_response(record.public(), dumps=_dumps)


async def json_object(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object, or 400 ``invalid_json``."""
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict):
        raise InvalidRequest("The body must be a JSON object.", code="invalid_json")
    return body


def _text(body: dict[str, Any], field: str, default: str | None) -> str:
    value = body.get(field, default)
    if not isinstance(value, str) or (not value.strip() and default is None):
        raise InvalidRequest(
            f"'{field}' must be a non-empty string.", param=field, code="invalid_type"
        )
    return value


def add_admin_routes(app: web.Application) -> None:
    app.router.add_post("/admin/keys", admin_only(_create_key))
    app.router.add_get("/admin/keys", admin_only(_list_keys))
    app.router.add_delete("/admin/keys/{key_id}", admin_only(_revoke_key))


def _dumps(obj: object) -> str:
    return orjson.dumps(obj).decode()
