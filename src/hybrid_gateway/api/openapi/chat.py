"""``/v1/chat/completions`` and ``/v1/models``: the OpenAI-compatible surface.

The request schema is derived from the parser's own tables (``api/schema.py``: the known
parameters, their types and ranges), so the description cannot drift from what is enforced.
"""

from __future__ import annotations

from typing import Any

from hybrid_gateway.api.openapi.chat_rules import (
    CONTENT_PART,
    MESSAGE_RULES,
    PARAMETERS,
    REQUEST_RULES,
)
from hybrid_gateway.api.openapi.parts import (
    DECISION_HEADERS,
    JsonObject,
    Section,
    error_responses,
    json_response,
    nullable,
    ref,
)
from hybrid_gateway.api.schema import (
    _INT_RANGES,
    _NUMBER_RANGES,
    _TYPED,
    KNOWN_PARAMS,
    ROLES,
)
from hybrid_gateway.api.validation import ENUMS, INT64

__all__ = ["section"]

_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean"}
# The JSON parser (orjson) reads integers in [-2**63, 2**64 - 1]; others are invalid JSON.
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1


def _parameter(name: str) -> JsonObject:
    schema: JsonObject
    if name in _NUMBER_RANGES:
        low, high = _NUMBER_RANGES[name]
        schema = {"type": "number"}
        if low is not None:
            schema["minimum"] = low
        if high is not None:
            schema["maximum"] = high
    elif name in _INT_RANGES:
        low_i, high_i = _INT_RANGES[name]
        schema = {"type": "integer", "minimum": low_i, "maximum": high_i or _INT_MAX}
    elif name == "seed":  # 64 bits, signed (api/validation.py)
        schema = {"type": "integer", "minimum": INT64[0], "maximum": INT64[1]}
    elif name in ENUMS:
        schema = {"type": "string", "enum": sorted(ENUMS[name])}
    elif name in PARAMETERS:  # structured (api/openapi/chat_rules.py)
        schema = PARAMETERS[name]
    elif name == "stop":
        schema = {
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "string"}, "maxItems": 4},
            ]
        }
    else:
        kinds = [_JSON_TYPES[t] for t in _TYPED[name]]
        schema = {"type": kinds[0] if len(kinds) == 1 else kinds}
    return nullable(schema)


_SPECIAL = ("model", "messages", "stream", "stream_options")


def _request_schema() -> JsonObject:
    properties: dict[str, Any] = {
        "model": {
            "type": "string",
            "minLength": 1,
            "description": "A model id from GET /v1/models (`auto` = routed).",
        },
        "messages": {"type": "array", "minItems": 1, "items": ref("ChatMessage")},
        "stream": {"type": ["boolean", "null"], "description": "Relay the answer as SSE."},
        "stream_options": {
            "type": ["object", "null"],
            "description": "Only with `stream: true`.",
            "properties": {"include_usage": {"type": "boolean"}},
        },
    }
    for name in sorted(KNOWN_PARAMS - set(_SPECIAL)):
        properties[name] = _parameter(name)
    return {
        "type": "object",
        "description": "OpenAI's chat completion request. Unknown parameters are refused "
        "(400 `unsupported_parameter`); `null` counts as omitted.",
        "required": ["model", "messages"],
        "additionalProperties": False,
        "properties": properties,
        # stream_options only with stream: true.
        "if": {
            "required": ["stream_options"],
            "properties": {"stream_options": {"not": {"type": "null"}}},
        },
        "then": {"required": ["stream"], "properties": {"stream": {"const": True}}},
        # parameters that need another one (top_logprobs: logprobs; tool_choice: tools)
        "allOf": REQUEST_RULES,
    }


_STREAM_DESCRIPTION = (
    "With `stream: true`: server-sent events, one `data: {chat.completion.chunk}` per upstream "
    "chunk as it arrives, the usage-only chunk when `stream_options.include_usage` is set, the "
    "comment `: x-gateway-cost-usd=...`, then `data: [DONE]`. A failure after the first byte "
    'ends the stream with a `data: {"error": ...}` event.'
)

# Any value but null, false, 0, "", [] and {} (what the parser takes as "given").
_TRUTHY: JsonObject = {"not": {"enum": [None, False, 0, "", [], {}]}}

_SCHEMAS: dict[str, JsonObject] = {
    "ChatMessage": {
        "type": "object",
        "required": ["role"],
        "properties": {
            "role": {"type": "string", "enum": sorted(ROLES)},
            "content": {
                "anyOf": [
                    {"type": "string"},
                    {"type": "array", "items": ref("ContentPart")},
                    {"type": "null"},
                ]
            },
            "name": {"description": "Passed to the upstream as given."},
            "tool_calls": {
                "description": "Each with an `id`; every call is answered by a `tool` message "
                "before the next other message (400 otherwise, as OpenAI).",
            },
            "tool_call_id": {
                "description": "Required on a `tool` message: an id from the `tool_calls` of "
                "the assistant message before it (400 otherwise, as OpenAI).",
            },
            "function_call": {"description": "Passed to the upstream as given."},
        },
        # `content` may be missing or null only on an assistant message that calls a tool.
        "anyOf": [
            {"required": ["content"], "properties": {"content": {"type": ["string", "array"]}}},
            {
                "properties": {"role": {"const": "assistant"}},
                "anyOf": [
                    {"required": ["tool_calls"], "properties": {"tool_calls": _TRUTHY}},
                    {"required": ["function_call"], "properties": {"function_call": _TRUTHY}},
                ],
            },
        ],
        # part types per role, tool_call_id on a tool message (api/openapi/chat_rules.py)
        "allOf": MESSAGE_RULES,
    },
    "ContentPart": CONTENT_PART,
    "ChatCompletion": {
        "type": "object",
        "description": "The upstream's answer, relayed as it came (or replayed from the cache).",
        "required": ["object", "choices"],
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "const": "chat.completion"},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "choices": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "index": {"type": "integer"},
                        "message": {"type": "object"},
                        "finish_reason": {"type": ["string", "null"]},
                    },
                },
            },
            "usage": ref("Usage"),
        },
    },
    "ChatCompletionEvent": {
        "type": "object",
        "description": "One server-sent event of a streamed answer. " + _STREAM_DESCRIPTION,
        "required": ["data"],
        "properties": {
            "data": {
                "type": "string",
                "description": 'A `chat.completion.chunk` object as JSON, an `{"error": ...}` '
                "object, or `[DONE]`.",
            }
        },
    },
    "Usage": {
        "type": "object",
        "properties": {
            "prompt_tokens": {"type": "integer"},
            "completion_tokens": {"type": "integer"},
            "total_tokens": {"type": "integer"},
        },
    },
    "Model": {
        "type": "object",
        "required": ["id", "object", "created", "owned_by"],
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "const": "model"},
            "created": {"type": "integer"},
            "owned_by": {"type": "string"},
        },
    },
    "ModelList": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"type": "string", "const": "list"},
            "data": {"type": "array", "items": ref("Model")},
        },
    },
}


def _chat_operation() -> JsonObject:
    ok = json_response("The answer.", ref("ChatCompletion"), DECISION_HEADERS)
    ok["content"]["text/event-stream"] = {"schema": ref("ChatCompletionEvent")}
    return {
        "operationId": "createChatCompletion",
        "summary": "Chat completion, answered from the cache, the light or the heavy lane",
        "tags": ["chat"],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ref("ChatCompletionRequest")}},
        },
        "responses": {
            "200": ok,
            **error_responses(400, 401, 402, 403, 404, 413, 429, 431, 502, 503, 504),
        },
    }


def section() -> Section:
    model_id = {
        "name": "model_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
    }
    return Section(
        paths={
            "/v1/chat/completions": {"post": _chat_operation()},
            "/v1/models": {
                "get": {
                    "operationId": "listModels",
                    "summary": "The model ids this gateway serves",
                    "tags": ["models"],
                    "responses": {
                        "200": json_response("The models.", ref("ModelList")),
                        **error_responses(401),
                    },
                }
            },
            "/v1/models/{model_id}": {
                "get": {
                    "operationId": "retrieveModel",
                    "summary": "One model id",
                    "tags": ["models"],
                    "parameters": [model_id],
                    "responses": {
                        "200": json_response("The model.", ref("Model")),
                        **error_responses(401, 404),
                    },
                }
            },
        },
        schemas={**_SCHEMAS, "ChatCompletionRequest": _request_schema()},
    )
