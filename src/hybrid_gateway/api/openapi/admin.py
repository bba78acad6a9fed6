"""Admin endpoints: API keys, behind the admin key (api/admin.py, docs/tenancy.md)."""

from __future__ import annotations

from hybrid_gateway.api.openapi.parts import (
    JsonObject,
    Section,
    error_responses,
    json_response,
    ref,
)

__all__ = ["SECURITY_NOTE", "section"]

SECURITY_NOTE = (
    " Needs `Authorization: Bearer <admin key>`, the value of the environment variable named by "
    "`auth.admin_key_env`: 403 `admin_api_disabled` while it is unset, 401 `invalid_admin_key` "
    "for a missing or wrong key."
)


def section() -> Section:
    key_id: JsonObject = {
        "name": "key_id", "in": "path", "required": True, "schema": {"type": "string"},
        "description": "The key's public id (12 hex characters).",
    }  # fmt: skip
    listing: JsonObject = {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"const": "list"},
            "data": {"type": "array", "items": ref("ApiKey")},
        },
    }
    return Section(
        paths={
            "/admin/keys": {
                "post": {
                    "operationId": "createKey",
                    "summary": "Make an API key for a tenant; the key is in this answer only",
                    "description": "The store keeps only its SHA-256." + SECURITY_NOTE,
                    "tags": ["admin"],
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": ref("ApiKeyRequest")}},
                    },
                    "responses": {
                        "201": json_response("The new key.", ref("NewApiKey")),
                        **error_responses(400, 401, 403),
                    },
                },
                "get": {
                    "operationId": "listKeys",
                    "summary": "Every key, without secrets",
                    "description": "Last-use times are written every 30 s." + SECURITY_NOTE,
                    "tags": ["admin"],
                    "responses": {
                        "200": json_response("The keys.", listing),
                        **error_responses(401, 403),
                    },
                },
            },
            "/admin/keys/{key_id}": {
                "delete": {
                    "operationId": "revokeKey",
                    "summary": "Revoke a key (idempotent); refused from the next request on",
                    "description": SECURITY_NOTE.strip(),
                    "tags": ["admin"],
                    "parameters": [key_id],
                    "responses": {
                        "200": json_response("The revoked key.", ref("ApiKey")),
                        **error_responses(401, 403, 404),
                    },
                }
            },
        },
        schemas={
            "ApiKeyRequest": {
                "type": "object",
                "required": ["tenant"],
                "properties": {
                    "tenant": {"type": "string", "description": "A tenant of the config."},
                    "app": {"type": "string", "default": "default"},
                    "name": {"type": "string", "default": ""},
                },
            },
            "ApiKey": {
                "type": "object",
                "required": ["id", "tenant", "app", "name", "created_at", "revoked"],
                "properties": {
                    "id": {"type": "string"},
                    "tenant": {"type": "string"},
                    "app": {"type": "string"},
                    "name": {"type": "string"},
                    "created_at": {"type": "number"},
                    "revoked": {"type": "boolean"},
                    "revoked_at": {"type": ["number", "null"]},
                    "last_used_at": {"type": ["number", "null"]},
                },
            },
            "NewApiKey": {
                "allOf": [
                    ref("ApiKey"),
                    {
                        "type": "object",
                        "required": ["key"],
                        "properties": {"key": {"type": "string", "pattern": "^hgw_"}},
                    },
                ]
            },
        },
    )
