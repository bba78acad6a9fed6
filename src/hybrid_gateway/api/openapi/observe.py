"""Feedback on answers and the built-in dashboard (docs/metrics.md)."""

from __future__ import annotations

from hybrid_gateway.api.openapi.parts import (
    JsonObject,
    Section,
    error_responses,
    json_response,
    ref,
)
from hybrid_gateway.feedback.model import MAX_COMMENT_CHARS, MAX_REQUEST_ID_CHARS, Rating, Reason

__all__ = ["section"]


def _text(description: str, *media: str) -> JsonObject:
    content = {kind: {"schema": {"type": "string"}} for kind in media}
    return {"description": description, "content": content}


def section() -> Section:
    request_id_param: JsonObject = {
        "name": "request_id", "in": "path", "required": True,
        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_REQUEST_ID_CHARS},
        "description": "The `x-request-id` of an answer this caller received.",
    }  # fmt: skip
    return Section(
        paths={
            "/v1/feedback": {
                "post": {
                    "operationId": "createFeedback",
                    "summary": "Rate an answer (up/down, reason, comment); rating again replaces",
                    "tags": ["feedback"],
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": ref("FeedbackRequest")}},
                    },
                    "responses": {
                        "200": json_response(
                            "The stored feedback.", ref("Feedback"), ["x-request-id"]
                        ),
                        **error_responses(400, 404, 413),
                    },
                }
            },
            "/v1/feedback/{request_id}": {
                "get": {
                    "operationId": "getFeedback",
                    "summary": "The feedback given on one of this caller's answers",
                    "tags": ["feedback"],
                    "parameters": [request_id_param],
                    "responses": {
                        "200": json_response(
                            "The stored feedback.", ref("Feedback"), ["x-request-id"]
                        ),
                        **error_responses(404),
                    },
                }
            },
            "/dashboard": {
                "get": {
                    "operationId": "dashboard",
                    "summary": "The built-in live dashboard (HTML, no external assets)",
                    "tags": ["operations"],
                    "responses": {"200": _text("The page.", "text/html")},
                }
            },
            "/dashboard/data.json": {
                "get": {
                    "operationId": "dashboardData",
                    "summary": "The dashboard's figures, computed from the metrics registry",
                    "tags": ["operations"],
                    "responses": {"200": json_response("The figures.", {"type": "object"})},
                }
            },
            "/dashboard/static/{name}": {
                "get": {
                    "operationId": "dashboardAsset",
                    "summary": "The dashboard's script and stylesheet",
                    "tags": ["operations"],
                    "parameters": [
                        {
                            "name": "name",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                    ],
                    "responses": {
                        "200": _text("The file.", "text/javascript", "text/css"),
                        **error_responses(404),
                    },
                }
            },
        },
        schemas={
            "FeedbackRequest": {
                "type": "object",
                "additionalProperties": False,
                "required": ["request_id", "rating"],
                "properties": {
                    "request_id": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_REQUEST_ID_CHARS,
                    },
                    "rating": {"type": "string", "enum": [r.value for r in Rating]},
                    "reason": {
                        "type": ["string", "null"],
                        "enum": [*(r.value for r in Reason), None],
                    },
                    "comment": {"type": ["string", "null"], "maxLength": MAX_COMMENT_CHARS},
                },
            },
            "Feedback": {
                "type": "object",
                "required": [
                    "object",
                    "request_id",
                    "rating",
                    "reason",
                    "comment",
                    "created_at",
                    "updated_at",
                    "request",
                ],
                "properties": {
                    "object": {"type": "string", "const": "feedback"},
                    "request_id": {"type": "string"},
                    "rating": {"type": "string", "enum": [r.value for r in Rating]},
                    "reason": {"type": ["string", "null"]},
                    "comment": {"type": ["string", "null"]},
                    "created_at": {"type": "integer"},
                    "updated_at": {"type": "integer"},
                    "request": {
                        "type": "object",
                        "description": "The rated request, from the request log.",
                        "properties": {
                            "model": {"type": "string"},
                            "lane": {"type": ["string", "null"]},
                            "channel": {"type": ["string", "null"]},
                            "rule": {"type": ["string", "null"]},
                            "cache": {"type": "string"},
                            "status": {"type": "integer"},
                        },
                    },
                },
            },
        },
    )
