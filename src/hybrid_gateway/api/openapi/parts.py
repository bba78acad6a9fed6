"""Building blocks of the OpenAPI description: schemas, headers and responses used everywhere.

Operations are plain dicts (the OpenAPI document *is* JSON); these helpers keep the parts every
operation shares (the OpenAI-style error object, the ``x-request-id`` and ``x-gateway-*``
headers, ``Retry-After``) defined once, so a new endpoint is a few lines that reference them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hybrid_gateway.types import CacheOutcome

__all__ = [
    "COMPONENT_HEADERS",
    "COMPONENT_SCHEMAS",
    "ERROR_STATUSES",
    "Section",
    "error_responses",
    "json_response",
    "nullable",
    "ref",
]

JsonObject = dict[str, Any]


@dataclass(frozen=True)
class Section:
    """Paths (``{"/path": {"get": operation}}``) and the component schemas they reference."""

    paths: Mapping[str, Mapping[str, JsonObject]]
    schemas: Mapping[str, JsonObject] = field(default_factory=dict)


def ref(name: str, kind: str = "schemas") -> JsonObject:
    return {"$ref": f"#/components/{kind}/{name}"}


def nullable(schema: JsonObject) -> JsonObject:
    """The same schema, with ``null`` also accepted (the parser treats null as omitted)."""
    kind = schema.get("type")
    if isinstance(kind, str):
        return {**schema, "type": [kind, "null"]}
    if isinstance(kind, list):
        return {**schema, "type": [*kind, "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def json_response(description: str, schema: JsonObject, headers: Sequence[str] = ()) -> JsonObject:
    """A response with a JSON body; ``headers`` names entries of ``COMPONENT_HEADERS``."""
    out: JsonObject = {
        "description": description,
        "content": {"application/json": {"schema": schema}},
    }
    if headers:
        out["headers"] = {name: ref(name, "headers") for name in headers}
    return out


# Why each status is sent; an operation lists the ones it can produce.
ERROR_STATUSES: Mapping[int, str] = {
    400: "Invalid request: malformed JSON (`invalid_json`), a missing, wrong-typed or "
    "out-of-range field (`missing_required_parameter`, `invalid_type`, `invalid_value`, with "
    "`param`), an unknown parameter (`unsupported_parameter`), more messages than "
    "`server.max_messages` (`array_above_max_length`), or a request the upstream "
    "rejected (`upstream_rejected_request`).",
    401: "No valid API key (`invalid_api_key`; `invalid_admin_key` on the admin API).",
    402: "The tenant's budget is spent (`insufficient_quota`).",
    403: "The key may not do this: a model outside its tenant's lanes (`model_not_allowed`), "
    "or the admin API while no admin key is configured (`admin_api_disabled`).",
    404: "Unknown model (`model_not_found`) or resource (`not_found`).",
    413: "Body over `server.max_body_bytes` (`request_too_large`).",
    431: "Request headers over `server.max_header_bytes` (`request_header_fields_too_large`).",
    429: "Over a rate limit or budget; `Retry-After` says when to come back.",
    502: "The upstream refused or reset the connection, answered 5xx or an unreadable body "
    "(`upstream_connection_error`, `upstream_status_NNN`, `upstream_bad_response`), after "
    "retries where retrying was safe.",
    503: "No capacity now: the lane's or channel's queue is full (`lane_queue_full`) or its "
    "deadline passed (`lane_queue_timeout`), the "
    "upstream rate-limited us (`upstream_rate_limited`) or its breaker is open with no backup "
    "(`circuit_open`); `Retry-After` says when to come back.",
    504: "The upstream gave no answer within the channel's `timeout_s` (`upstream_timeout`).",
}

_RETRY_AFTER_STATUSES = frozenset({429, 503})


def error_responses(*statuses: int) -> dict[str, JsonObject]:
    """The OpenAI-style error response for each status, with its headers."""
    out: dict[str, JsonObject] = {}
    for status in statuses:
        headers = ["x-request-id"]
        if status in _RETRY_AFTER_STATUSES:
            headers.append("Retry-After")
        out[str(status)] = json_response(ERROR_STATUSES[status], ref("Error"), headers)
    return out


def _string(description: str, **extra: Any) -> JsonObject:
    return {"description": description, "schema": {"type": "string", **extra}}


COMPONENT_HEADERS: Mapping[str, JsonObject] = {
    "x-request-id": _string(
        "The gateway's id for this request; also in every error body and the request log.",
        pattern="^req_",
    ),
    "x-gateway-route": _string(
        "`lane=NAME; channel=NAME; rule=NAME` (`rule=default` when no rule matched, "
        "`rule=model:NAME` when the client asked for a lane's model); `none` before routing.",
    ),
    "x-gateway-cache": _string(
        "How the cache took part.", enum=sorted(outcome.value for outcome in CacheOutcome)
    ),
    "x-gateway-cost-usd": _string(
        "Upstream cost in USD (`0.00000000` for a cache hit). For a stream it is `pending`: the "
        "figure arrives as the SSE comment `: x-gateway-cost-usd=...` before `data: [DONE]`.",
        pattern=r"^([0-9]+\.[0-9]{8}|pending)$",
    ),
    "x-gateway-retries": _string(
        "How many times the upstream call was retried.", pattern="^[0-9]+$"
    ),
    "x-gateway-breaker": _string(
        "`CHANNEL=closed|half_open|open`: the circuit breaker of the channel used."
    ),
    "x-gateway-fallback": _string(
        "`breaker` when the lane's backup channel answered because the primary's breaker is "
        "open; `failover` when a failed attempt was retried on the backup; `timeout` when the "
        "lane's deadline passed and its fallback lane answered; `shed` for a load-shedding "
        "message; absent otherwise."
    ),
    "x-gateway-result-url": _string(
        "With `x-gateway-fallback: timeout`: where the slow lane's answer can be fetched "
        "(`/v1/gateway/results/{request_id}`)."
    ),
    "Retry-After": _string("Seconds to wait before trying again.", pattern="^[0-9]+$"),
}

# The headers on every answer of the chat endpoint, success or error.
DECISION_HEADERS: tuple[str, ...] = (
    "x-request-id", "x-gateway-route", "x-gateway-cache", "x-gateway-cost-usd",
    "x-gateway-retries", "x-gateway-breaker", "x-gateway-fallback", "x-gateway-result-url",
)  # fmt: skip

COMPONENT_SCHEMAS: Mapping[str, JsonObject] = {
    "Error": {
        "type": "object",
        "description": "Every error, OpenAI-shaped; never a traceback.",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type", "param", "code", "request_id"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "param": {"type": ["string", "null"]},
                    "code": {"type": ["string", "null"]},
                    "request_id": {"type": "string", "pattern": "^req_"},
                },
            }
        },
    },
}
