"""Admin endpoints of the semantic cache (api/admin_cache.py, docs/semantic-cache.md).

Same guard as the key admin API: the admin key, 403 while it is unset.  Every operation also
answers 404 `semantic_cache_disabled` while `cache.semantic.enabled` is off, so the fuzzer
meets that answer on a gateway without the semantic cache.
"""

from __future__ import annotations

from hybrid_gateway.api.admin_cache import MAX_ENTRY_ID
from hybrid_gateway.api.openapi.admin import SECURITY_NOTE
from hybrid_gateway.api.openapi.parts import (
    JsonObject,
    Section,
    error_responses,
    json_response,
    nullable,
    ref,
)

__all__ = ["section"]

_BASE = "/admin/cache/semantic"
_DISABLED = " 404 `semantic_cache_disabled` while the semantic cache is off."


def _operation(
    operation_id: str,
    summary: str,
    ok: JsonObject,
    errors: tuple[int, ...],
    *,
    parameters: tuple[JsonObject, ...] = (),
    body: str | None = None,
) -> JsonObject:
    out: JsonObject = {
        "operationId": operation_id,
        "summary": summary,
        "description": SECURITY_NOTE.strip() + _DISABLED,
        "tags": ["admin"],
        "responses": {"200": ok, **error_responses(*errors)},
    }
    if parameters:
        out["parameters"] = list(parameters)
    if body is not None:
        out["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": ref(body)}},
        }
    return out


def section() -> Section:
    entry_id: JsonObject = {
        "name": "entry_id", "in": "path", "required": True,
        "schema": {"type": "integer", "minimum": 0, "maximum": MAX_ENTRY_ID},
        "description": "The entry's id: the `x-gateway-cache-entry` header of a semantic hit.",
    }  # fmt: skip
    tenant: JsonObject = {
        "name": "tenant", "in": "path", "required": True, "schema": {"type": "string"},
        "description": "A tenant; its cache scope (the shared `cache_scope` if it declares "
        "one) is emptied.",
    }  # fmt: skip
    entry = ref("SemanticCacheEntry")
    by_id = (400, 401, 403, 404)
    stats = _operation(
        "semanticCacheStats", "Entries, bytes, the decision in force",
        json_response("The figures.", ref("SemanticCacheStats")), (401, 403, 404),
    )  # fmt: skip
    search = _operation(
        "searchSemanticCache", "The stored questions nearest to a chat request, in a tenant's "
        "scope", json_response("Up to 5 entries, nearest first.", ref("SemanticSearchResult")),
        by_id, body="SemanticSearch",
    )  # fmt: skip
    get_entry = _operation(
        "getSemanticEntry", "One entry: question, answer, scope, times",
        json_response("The entry.", entry), by_id, parameters=(entry_id,),
    )  # fmt: skip
    correct = _operation(
        "correctSemanticEntry", "Replace a cached answer's text",
        json_response("The corrected entry.", entry), by_id, parameters=(entry_id,),
        body="SemanticCorrection",
    )  # fmt: skip
    drop = _operation(
        "deleteSemanticEntry", "Invalidate one entry",
        json_response("Deleted.", ref("SemanticDeleted")), by_id, parameters=(entry_id,),
    )  # fmt: skip
    drop_tenant = _operation(
        "deleteSemanticTenant", "Invalidate a tenant's whole cache scope",
        json_response("How many entries went.", ref("SemanticTenantDeleted")),
        (401, 403, 404), parameters=(tenant,),
    )  # fmt: skip
    paths: dict[str, dict[str, JsonObject]] = {
        _BASE: {"get": stats},
        f"{_BASE}/search": {"post": search},
        f"{_BASE}/entries/{{entry_id}}": {"get": get_entry, "put": correct, "delete": drop},
        f"{_BASE}/tenants/{{tenant}}": {"delete": drop_tenant},
    }
    return Section(paths=paths, schemas=_SCHEMAS)


def _object(required: list[str], **properties: JsonObject) -> JsonObject:
    return {"type": "object", "required": required, "properties": properties}


_SCHEMAS: dict[str, JsonObject] = {
    "SemanticCacheStats": _object(
        ["backend", "entries", "bytes", "threshold", "guards", "embedder"],
        backend={"type": "string", "enum": ["memory", "sqlite", "postgres"]},
        entries=nullable({"type": "integer"}), bytes=nullable({"type": "integer"}),
        threshold={"type": "number"}, guards={"type": "array", "items": {"type": "string"}},
        embedder={"type": "string"},
        up={"type": "boolean", "description": "postgres only: its store is reachable "
            "(entries and bytes are null while it is not)."},
        errors={"type": "integer"}, last_error=nullable({"type": "string"}),
    ),
    "SemanticCacheEntry": _object(
        ["id", "scope", "embedder", "question", "answer", "created_at", "last_used"],
        id={"type": "integer"}, scope={"type": "string"}, embedder={"type": "string"},
        question={"type": "string"}, answer=nullable({"type": "string"}),
        created_at={"type": "number"}, last_used={"type": "number"},
        similarity={"type": "number", "description": "Cosine to the searched question."},
    ),
    "SemanticSearch": _object(
        ["request"],
        tenant={"type": "string", "default": "default"},
        request={"type": "object", "description": "A chat completion request body."},
    ),
    "SemanticSearchResult": _object(
        ["object", "question", "data"],
        object={"const": "list"},
        question={"type": "string", "description": "The question as embedded (noise stripped)."},
        data={"type": "array", "items": ref("SemanticCacheEntry")},
    ),
    "SemanticCorrection": _object(
        ["content"], content={"type": "string", "minLength": 1, "pattern": r"\S"}
    ),
    "SemanticDeleted": _object(["id", "deleted"], id={"type": "integer"},
                               deleted={"type": "boolean"}),
    "SemanticTenantDeleted": _object(["tenant", "scope", "deleted"], tenant={"type": "string"},
                                     scope={"type": "string"}, deleted={"type": "integer"}),
}  # fmt: skip
