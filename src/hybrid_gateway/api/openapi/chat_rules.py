"""The chat request's structured parameters and message rules, from ``api/validation.py``.

What the gateway refuses as OpenAI does, said as JSON Schema where a schema can say it: the
structure of ``tools``, ``tool_choice``, ``response_format``, ``metadata``, ``logit_bias``,
``modalities``; content-part types per role; a tool message's ``tool_call_id``; parameters
that need another one.  One rule spans messages and no per-message schema can say it: a
``tool`` message must answer a ``tool_calls`` id of the assistant message just before it, and
every such call must be answered (400 naming ``messages[i].role`` or
``messages[i].tool_call_id``).
"""

from __future__ import annotations

from hybrid_gateway.api.openapi.parts import JsonObject
from hybrid_gateway.api.validation import (
    MAX_TOOLS,
    METADATA_KEY_CHARS,
    METADATA_PAIRS,
    METADATA_VALUE_CHARS,
    MODALITIES,
    PART_TYPES,
    RESPONSE_FORMATS,
    TOOL_CHOICE_MODES,
    TOOL_CHOICE_TYPES,
    TOOL_TYPES,
)

__all__ = ["CONTENT_PART", "MESSAGE_RULES", "PARAMETERS", "REQUEST_RULES"]

_NAME: JsonObject = {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"}
_NAMED: JsonObject = {"type": "object", "required": ["name"], "properties": {"name": _NAME}}


def _when(name: str, value: str, then: JsonObject) -> JsonObject:
    return {"if": {"required": [name], "properties": {name: {"const": value}}}, "then": then}


def _tools() -> JsonObject:
    return {
        "type": "array",
        "maxItems": MAX_TOOLS,
        "items": {
            "type": "object",
            "required": ["type"],
            "properties": {"type": {"enum": sorted(TOOL_TYPES)}},
            "allOf": [_when("type", kind, {"required": [kind], "properties": {kind: _NAMED}})
                      for kind in sorted(TOOL_TYPES)],
        },
    }  # fmt: skip


def _tool_choice() -> JsonObject:
    named = [_when("type", kind, {"required": [kind], "properties": {kind: _NAMED}})
             for kind in sorted(TOOL_CHOICE_TYPES - {"allowed_tools"})]  # fmt: skip
    allowed = _when("type", "allowed_tools", {"required": ["allowed_tools"],
                    "properties": {"allowed_tools": {"type": "object"}}})  # fmt: skip
    return {
        "anyOf": [
            {"type": "string", "enum": sorted(TOOL_CHOICE_MODES)},
            {"type": "object", "required": ["type"],
             "properties": {"type": {"enum": sorted(TOOL_CHOICE_TYPES)}},
             "allOf": [*named, allowed]},
        ]
    }  # fmt: skip


def _response_format() -> JsonObject:
    return {
        "type": "object",
        "required": ["type"],
        "properties": {"type": {"enum": sorted(RESPONSE_FORMATS)}},
        "allOf": [_when("type", "json_schema", {"required": ["json_schema"],
                                                "properties": {"json_schema": _NAMED}})],
    }  # fmt: skip


PARAMETERS: dict[str, JsonObject] = {
    "tools": _tools(),
    "tool_choice": _tool_choice(),
    "response_format": _response_format(),
    "metadata": {
        "type": "object",
        "maxProperties": METADATA_PAIRS,
        "propertyNames": {"maxLength": METADATA_KEY_CHARS},
        "additionalProperties": {"type": "string", "maxLength": METADATA_VALUE_CHARS},
    },
    "logit_bias": {
        "type": "object",
        "description": "Token ids (as strings) to a bias between -100 and 100.",
        "propertyNames": {"pattern": "^-?[0-9]+$"},
        "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100},
    },
    "modalities": {"type": "array", "items": {"enum": sorted(MODALITIES)}},
}


def _given(name: str) -> JsonObject:
    """``name`` is in the body and not null (the parser takes null as omitted)."""
    return {"required": [name], "properties": {name: {"not": {"type": "null"}}}}


REQUEST_RULES: list[JsonObject] = [
    {"if": _given("top_logprobs"), "then": {"required": ["logprobs"],
                                            "properties": {"logprobs": {"const": True}}}},
    *({"if": _given(name), "then": {"required": ["tools"],
                                    "properties": {"tools": {"type": "array", "minItems": 1}}}}
      for name in ("tool_choice", "parallel_tool_calls")),
]  # fmt: skip


def _parts_of(role: str) -> JsonObject:
    parts = {"type": "array", "items": {"properties": {"type": {"enum": sorted(PART_TYPES[role])}}}}
    return _when("role", role, {"properties": {"content": {"anyOf": [
        {"type": ["string", "null"]}, parts]}}})  # fmt: skip


MESSAGE_RULES: list[JsonObject] = [
    *(_parts_of(role) for role in sorted(PART_TYPES)),
    _when("role", "tool", {"required": ["tool_call_id"],
                           "properties": {"tool_call_id": {"type": "string"}}}),
    _when("role", "function", {"required": ["name"], "properties": {"name": {"type": "string"}}}),
    {"properties": {"tool_calls": {"anyOf": [{"type": "null"}, {"type": "array", "items": {
        "type": "object", "required": ["id"], "properties": {"id": {"type": "string"},
                                                            "type": {"enum": sorted(TOOL_TYPES)}},
    }}]}}},
]  # fmt: skip

# The payload each part type carries.
_PAYLOADS: dict[str, JsonObject] = {
    "text": {"text": {"type": "string"}},
    "refusal": {"refusal": {"type": "string"}},
    "image_url": {"image_url": {"type": "object", "required": ["url"],
                                "properties": {"url": {"type": "string"}}}},
    "input_audio": {"input_audio": {"type": "object", "required": ["format"],
                                    "properties": {"format": {"enum": ["mp3", "wav"]}}}},
    "file": {"file": {"type": "object"}},
}  # fmt: skip

CONTENT_PART: JsonObject = {
    "type": "object",
    "required": ["type"],
    "description": "Types per role: "
    + "; ".join(f"{role}: {', '.join(sorted(t))}" for role, t in sorted(PART_TYPES.items()))
    + " (others are a 400 naming `messages[i].content[j].type`).",
    "properties": {"type": {"type": "string", "enum": sorted(_PAYLOADS)}},
    "allOf": [_when("type", kind, {"required": list(payload), "properties": payload})
              for kind, payload in sorted(_PAYLOADS.items())],
}  # fmt: skip
