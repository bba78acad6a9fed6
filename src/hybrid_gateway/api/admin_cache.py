"""Admin endpoints for the semantic cache: find, drop and correct cached answers.

    GET    /admin/cache/semantic                   backend, entries, bytes, the decision in
                                                   force (postgres: up, errors, last_error)
    POST   /admin/cache/semantic/search            {"tenant"?, "request": {chat body}} ->
                                                   the nearest stored questions in its partition
    GET    /admin/cache/semantic/entries/{id}      one entry: question, answer, scope, times
    PUT    /admin/cache/semantic/entries/{id}      {"content": "the right answer"}: correct it
    DELETE /admin/cache/semantic/entries/{id}      invalidate one entry
    DELETE /admin/cache/semantic/tenants/{tenant}  invalidate the tenant's whole namespace (its
                                                   shared cache_scope, if it declared one)

A user who flags a wrong answer hands over its ``x-gateway-cache-entry`` header; the operator
corrects or drops that entry.  ``add_admin_cache_routes(app)`` mounts these behind the admin
key (``api/admin.py`` ``admin_only``).  With the semantic cache disabled they answer 404
``semantic_cache_disabled``.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from hybrid_gateway.api.admin import admin_only, json_object
from hybrid_gateway.api.routes import RUNTIME
from hybrid_gateway.api.schema import parse_chat_request
from hybrid_gateway.cache.semantic.hygiene import semantic_key
from hybrid_gateway.cache.semantic.stage import SemanticStage, scope_of
from hybrid_gateway.cache.semantic.store import StoredEntry
from hybrid_gateway.errors import InvalidRequest, RequestError
from hybrid_gateway.tenancy.settings import DEFAULT_TENANT

__all__ = ["add_admin_cache_routes", "corrected_body"]


class _NotFound(RequestError):
    status = 404
    code = "not_found"


def _stage(request: web.Request) -> SemanticStage:
    stage = request.app[RUNTIME].semantic
    if stage is None:
        raise _NotFound("The semantic cache is not enabled.", code="semantic_cache_disabled")
    return stage


# Entry ids are SQLite INTEGERs: a larger number is no id (and would overflow the driver).
MAX_ENTRY_ID = 2**63 - 1


def _entry_id(request: web.Request) -> int:
    raw = request.match_info["entry_id"]
    if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_ENTRY_ID:
        raise InvalidRequest(
            f"The entry id is a whole number up to {MAX_ENTRY_ID}.", param="id",
            code="invalid_value",
        )  # fmt: skip
    return int(raw)


def _public(entry: StoredEntry, similarity: float | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": entry.id, "scope": entry.scope, "embedder": entry.embedder,
        "question": entry.question, "answer": _answer_text(entry.body),
        "created_at": entry.created_at, "last_used": entry.last_used,
    }  # fmt: skip
    if similarity is not None:
        out["similarity"] = round(similarity, 4)
    return out


def _answer_text(body: bytes) -> str | None:
    try:
        content = orjson.loads(body)["choices"][0]["message"]["content"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None


def corrected_body(body: bytes, content: str) -> bytes:
    """The stored completion with every choice's message content replaced."""
    completion = orjson.loads(body)
    for choice in completion.get("choices", []):
        if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
            choice["message"]["content"] = content
    return orjson.dumps(completion)


async def _stats(request: web.Request) -> web.StreamResponse:
    stage = _stage(request)
    rule = stage.cache.rule
    return _json({
        **await stage.cache.stats(),  # backend, entries, bytes (+ up/errors for postgres)
        "threshold": rule.threshold, "guards": list(rule.guards),
        "embedder": stage.namespace(DEFAULT_TENANT).embedder,
    })  # fmt: skip


async def _search(request: web.Request) -> web.StreamResponse:
    stage = _stage(request)
    body = await json_object(request)
    tenant = body.get("tenant", DEFAULT_TENANT)
    chat_body = body.get("request")
    if not isinstance(tenant, str) or not isinstance(chat_body, dict):
        raise InvalidRequest("Send {\"tenant\": T, \"request\": {a chat completion body}}.",
                             param="request", code="invalid_type")  # fmt: skip
    key = semantic_key(parse_chat_request(chat_body), stage.stripper)
    if key is None:
        raise InvalidRequest("The request has no final user question.", param="request")
    vector = await stage.embedder.embed_one(key.question)
    found = await stage.cache.find(stage.namespace(tenant), key.bucket, vector, k=5)
    return _json({"object": "list", "question": key.question,
                  "data": [_public(e, s) for e, s in found]})  # fmt: skip


async def _get(request: web.Request) -> web.StreamResponse:
    entry = await _stage(request).cache.get(_entry_id(request))
    if entry is None:
        raise _NotFound("No semantic cache entry with that id.", param="id")
    return _json(_public(entry))


async def _correct(request: web.Request) -> web.StreamResponse:
    stage, entry_id = _stage(request), _entry_id(request)
    content = (await json_object(request)).get("content")
    if not isinstance(content, str) or not content.strip():
        raise InvalidRequest("'content' must be the corrected answer text.", param="content",
                             code="invalid_type")  # fmt: skip
    entry = await stage.cache.get(entry_id)
    if entry is None or not await stage.cache.correct(
        entry_id, corrected_body(entry.body, content)
    ):
        raise _NotFound("No semantic cache entry with that id.", param="id")
    fixed = await stage.cache.get(entry_id)
    assert fixed is not None
    return _json(_public(fixed))


async def _invalidate(request: web.Request) -> web.StreamResponse:
    entry_id = _entry_id(request)
    if not await _stage(request).cache.invalidate(entry_id):
        raise _NotFound("No semantic cache entry with that id.", param="id")
    return _json({"id": entry_id, "deleted": True})


async def _invalidate_tenant(request: web.Request) -> web.StreamResponse:
    stage = _stage(request)
    tenant = request.match_info["tenant"]
    scope = scope_of(tenant, stage.shared_scopes)
    return _json({"tenant": tenant, "scope": scope,
                  "deleted": await stage.cache.invalidate_scope(scope)})  # fmt: skip


def _json(payload: object) -> web.Response:
    return web.json_response(payload, dumps=lambda o: orjson.dumps(o).decode())


def add_admin_cache_routes(app: web.Application) -> None:
    base = "/admin/cache/semantic"
    app.router.add_get(base, admin_only(_stats))
    app.router.add_post(f"{base}/search", admin_only(_search))
    app.router.add_get(f"{base}/entries/{{entry_id}}", admin_only(_get))
    app.router.add_put(f"{base}/entries/{{entry_id}}", admin_only(_correct))
    app.router.add_delete(f"{base}/entries/{{entry_id}}", admin_only(_invalidate))
    app.router.add_delete(f"{base}/tenants/{{tenant}}", admin_only(_invalidate_tenant))
