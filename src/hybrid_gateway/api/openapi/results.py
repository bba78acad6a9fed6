"""Deferred results: the late answer of a deadline fallback (docs/resilience.md)."""

from __future__ import annotations

from hybrid_gateway.api.openapi.parts import (
    JsonObject,
    Section,
    error_responses,
    json_response,
    ref,
)

__all__ = ["section"]


def section() -> Section:
    request_id: JsonObject = {
        "name": "request_id", "in": "path", "required": True,
        "schema": {"type": "string", "minLength": 1},
        "description": "The `x-request-id` of an answer marked `x-gateway-fallback: timeout` "
        "(its `x-gateway-result-url`).",
    }  # fmt: skip
    failed = error_responses(401, 404, 502, 503, 504)
    return Section(
        paths={
            "/v1/gateway/results/{request_id}": {
                "get": {
                    "operationId": "getDeferredResult",
                    "summary": "The slow lane's late answer: 202 pending, 200 done, or its error",
                    "description": "Only the tenant that made the request may read it; for any "
                    "other caller, and for unknown or expired ids, the answer is 404 "
                    "`request_not_found`. A failed slow request answers with its own error "
                    "(`deferred_cancelled` 503 when the gateway shut down first). A replica "
                    "that cannot reach the shared store answers 503 `store_unavailable` with "
                    "`Retry-After` for ids it did not run itself.",
                    "tags": ["chat"],
                    "parameters": [request_id],
                    "responses": {
                        "200": json_response(
                            "The late chat.completion (a streamed request's, assembled).",
                            ref("ChatCompletion"),
                            ["x-request-id"],
                        ),
                        "202": json_response(
                            "Still running.", ref("DeferredPending"), ["x-request-id"]
                        ),
                        **failed,
                    },
                }
            },
        },
        schemas={
            "DeferredPending": {
                "type": "object",
                "required": ["object", "id", "status"],
                "properties": {
                    "object": {"type": "string", "const": "gateway.deferred_result"},
                    "id": {"type": "string"},
                    "status": {"type": "string", "const": "pending"},
                },
            }
        },
    )
