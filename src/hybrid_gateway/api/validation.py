"""What OpenAI itself refuses, refused here too, with the ``param`` OpenAI names.

``schema.py`` checks types and ranges of the top-level parameters; this module checks the
conversation (content-part types per role, tool messages answering the ``tool_calls`` of the
assistant message before them) and the structured parameters (``tools``, ``tool_choice``,
``response_format``, ``logit_bias``, ``metadata``, the enumerations).  An upstream that is not
OpenAI often answers such a request with a 500 (llama-cpp-python does), which would count
against its circuit breaker for every tenant; refused at the gateway it is the sender's 400.

The accepted values follow the official SDK's request types (``openai.types.chat``);
tests/api/test_validation_sdk.py reads them from the installed ``openai`` package and checks
that every value the SDK can send is accepted here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from hybrid_gateway.errors import InvalidRequest

__all__ = ["PART_TYPES", "check_conversation", "check_structured"]

# Content-part types each role may send (the SDK's message param types).
PART_TYPES: Mapping[str, frozenset[str]] = {
    "system": frozenset({"text"}),
    "developer": frozenset({"text"}),
    "user": frozenset({"text", "image_url", "input_audio", "file"}),
    "assistant": frozenset({"text", "refusal"}),
    "tool": frozenset({"text"}),
}
# The field holding each part type's payload, and the type it must have.
_PART_FIELDS: Mapping[str, tuple[str, type]] = {
    "text": ("text", str),
    "refusal": ("refusal", str),
    "image_url": ("image_url", dict),
    "input_audio": ("input_audio", dict),
    "file": ("file", dict),
}

ENUMS: Mapping[str, frozenset[str]] = {
    "reasoning_effort": frozenset({"none", "minimal", "low", "medium", "high", "xhigh", "max"}),
    "service_tier": frozenset({"auto", "default", "flex", "scale", "priority", "fast"}),
    "verbosity": frozenset({"low", "medium", "high"}),
    "prompt_cache_retention": frozenset({"in_memory", "24h"}),
}
MODALITIES = frozenset({"text", "audio"})
RESPONSE_FORMATS = frozenset({"text", "json_object", "json_schema"})
TOOL_TYPES = frozenset({"function", "custom"})
TOOL_CHOICE_MODES = frozenset({"none", "auto", "required"})
TOOL_CHOICE_TYPES = frozenset({"function", "custom", "allowed_tools"})
MAX_TOOLS = 128
INT64 = (-(2**63), 2**63 - 1)
METADATA_PAIRS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def check_conversation(messages: Sequence[Mapping[str, Any]]) -> None:
    """Part types per role, and tool messages answering the tool calls just before them.

    ``messages`` already passed ``schema._check_messages`` (objects with a known role)."""
    open_calls: set[str] | None = None  # ids the last assistant message called, unanswered
    calling: int = -1  # the index of that assistant message
    for i, message in enumerate(messages):
        role = message["role"]
        where = f"messages[{i}]"
        if role != "tool" and open_calls:
            _unanswered(calling, open_calls)
        if role == "tool":
            _answer(where, message, open_calls)
        else:
            open_calls = None
        content = message.get("content")
        if isinstance(content, list) and role in PART_TYPES:
            _check_parts(where, role, content)
        if role == "assistant":
            calls = _tool_call_ids(where, message.get("tool_calls"))
            if calls:
                open_calls, calling = calls, i
        elif role == "function" and not isinstance(message.get("name"), str):
            _missing(f"{where}.name")
    if open_calls:
        _unanswered(calling, open_calls)


def _answer(where: str, message: Mapping[str, Any], open_calls: set[str] | None) -> None:
    call_id = message.get("tool_call_id")
    if call_id is None:
        _missing(f"{where}.tool_call_id")
    if not isinstance(call_id, str):
        _invalid_type(f"{where}.tool_call_id", "a string")
    if open_calls is None:
        raise InvalidRequest(
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
            "message with 'tool_calls'.",
            param=f"{where}.role", code="invalid_value",
        )  # fmt: skip
    if call_id not in open_calls:
        raise InvalidRequest(
            f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in 'tool_calls' of "
            "previous message.",
            param=f"{where}.tool_call_id", code="invalid_value",
        )  # fmt: skip
    open_calls.discard(call_id)


def _unanswered(index: int, open_calls: set[str]) -> NoReturn:
    raise InvalidRequest(
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(sorted(open_calls)),
        param=f"messages[{index}].role", code="invalid_value",
    )  # fmt: skip


def _tool_call_ids(where: str, calls: Any) -> set[str]:
    if calls is None:
        return set()
    if not isinstance(calls, list):
        _invalid_type(f"{where}.tool_calls", "an array")
    ids: set[str] = set()
    for j, call in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        if not isinstance(call, dict):
            _invalid_type(at, "an object")
        call_id = call.get("id")
        if not isinstance(call_id, str):
            if call_id is None:
                _missing(f"{at}.id")
            _invalid_type(f"{at}.id", "a string")
        kind = call.get("type", "function")
        if not _one_of(kind, TOOL_TYPES):
            _bad_value(f"{at}.type", kind, TOOL_TYPES)
        ids.add(call_id)
    return ids


def _one_of(value: Any, allowed: frozenset[str]) -> bool:
    """``value`` is one of ``allowed`` (a JSON array or object never is: no hashing)."""
    return isinstance(value, str) and value in allowed


def _check_parts(where: str, role: str, parts: list[Any]) -> None:
    allowed = PART_TYPES[role]
    for j, part in enumerate(parts):
        at = f"{where}.content[{j}]"
        kind = part["type"]  # schema checked it is a string
        if kind not in allowed:
            _bad_value(f"{at}.type", kind, allowed, f" for a message with role '{role}'")
        field, expected = _PART_FIELDS[kind]
        value: Any = part.get(field)
        if value is None:
            _missing(f"{at}.{field}")
        if not isinstance(value, expected):
            _invalid_type(f"{at}.{field}", "a string" if expected is str else "an object")
        if kind == "image_url" and not isinstance(part[field].get("url"), str):
            _missing(f"{at}.image_url.url")
        if kind == "input_audio":
            fmt = part[field].get("format")
            if fmt not in ("wav", "mp3"):
                _bad_value(f"{at}.input_audio.format", fmt, frozenset({"wav", "mp3"}))


# -- structured parameters -------------------------------------------------------------------


def check_structured(body: Mapping[str, Any]) -> None:
    """The parameters with an inner structure or a closed set of values; types are checked."""
    for name, check in _STRUCTURED.items():
        value = body.get(name)
        if value is not None:
            check(value)
    tools = body.get("tools") or body.get("functions")
    for name in ("tool_choice", "parallel_tool_calls"):
        if body.get(name) is not None and not tools:
            raise InvalidRequest(
                f"Invalid value for '{name}': '{name}' is only allowed when 'tools' are "
                "specified.",
                param=name, code="invalid_value",
            )  # fmt: skip
    if body.get("top_logprobs") is not None and body.get("logprobs") is not True:
        raise InvalidRequest(
            "Invalid value for 'top_logprobs': 'logprobs' must be true when 'top_logprobs' is "
            "set.",
            param="top_logprobs", code="invalid_value",
        )  # fmt: skip


def _check_seed(value: Any) -> None:
    if not INT64[0] <= value <= INT64[1]:
        raise InvalidRequest(
            f"Invalid 'seed': integer above maximum value. Expected a value between {INT64[0]} "
            f"and {INT64[1]} (64 bits), but got {value} instead.",
            param="seed",
            code="integer_above_max_value" if value > 0 else "integer_below_min_value",
        )


def _check_logit_bias(value: Any) -> None:
    for key, bias in value.items():
        if not key.lstrip("-").isdigit():
            raise InvalidRequest(
                f"Invalid key in 'logit_bias': {key!r}. Keys must be token ids (integers, as "
                "strings).",
                param="logit_bias", code="invalid_value",
            )  # fmt: skip
        if isinstance(bias, bool) or not isinstance(bias, int | float) or not -100 <= bias <= 100:
            raise InvalidRequest(
                f"Invalid value for 'logit_bias' key {key!r}: expected a number between -100 "
                f"and 100, got {bias!r}.",
                param="logit_bias", code="invalid_value",
            )  # fmt: skip


def _check_metadata(value: Any) -> None:
    if len(value) > METADATA_PAIRS:
        _too_large(
            "metadata", "too many properties", f"an object with at most {METADATA_PAIRS} "
            f"properties", f"an object with {len(value)} properties", "object_above_max_properties",
        )  # fmt: skip
    for key, item in value.items():
        if len(key) > METADATA_KEY_CHARS:
            raise InvalidRequest(
                f"Invalid 'metadata': key {key[:20]!r}... is longer than {METADATA_KEY_CHARS} "
                "characters.",
                param="metadata", code="invalid_value",
            )  # fmt: skip
        if not isinstance(item, str):
            _invalid_type(f"metadata.{key}", "a string")
        if len(item) > METADATA_VALUE_CHARS:
            _too_large(
                f"metadata.{key}", "string too long", f"a string with maximum length "
                f"{METADATA_VALUE_CHARS}", f"a string with length {len(item)}",
                "string_above_max_length",
            )  # fmt: skip


def _check_response_format(value: Any) -> None:
    kind = value.get("type")
    if kind is None:
        _missing("response_format.type")
    if not _one_of(kind, RESPONSE_FORMATS):
        _bad_value("response_format.type", kind, RESPONSE_FORMATS)
    if kind != "json_schema":
        return
    schema = _object("response_format.json_schema", value.get("json_schema"))
    _check_name("response_format.json_schema.name", schema.get("name"))


def _check_tools(value: Any) -> None:
    if len(value) > MAX_TOOLS:
        _too_large(
            "tools", "array too long", f"an array with maximum length {MAX_TOOLS}",
            f"an array with length {len(value)}", "array_above_max_length",
        )  # fmt: skip
    for i, tool in enumerate(value):
        at = f"tools[{i}]"
        if not isinstance(tool, dict):
            _invalid_type(at, "an object")
        kind = tool.get("type")
        if kind is None:
            _missing(f"{at}.type")
        if not _one_of(kind, TOOL_TYPES):
            _bad_value(f"{at}.type", kind, TOOL_TYPES)
        spec = _object(f"{at}.{kind}", tool.get(kind))
        _check_name(f"{at}.{kind}.name", spec.get("name"))
        parameters = spec.get("parameters")
        if kind == "function" and parameters is not None and not isinstance(parameters, dict):
            _invalid_type(f"{at}.function.parameters", "an object")


def _check_tool_choice(value: Any) -> None:
    if isinstance(value, str):
        if not _one_of(value, TOOL_CHOICE_MODES):
            _bad_value("tool_choice", value, TOOL_CHOICE_MODES)
        return
    kind = value.get("type")
    if not _one_of(kind, TOOL_CHOICE_TYPES):
        _bad_value("tool_choice.type", kind, TOOL_CHOICE_TYPES)
    spec = _object(f"tool_choice.{kind}", value.get(kind))
    if kind != "allowed_tools":
        _check_name(f"tool_choice.{kind}.name", spec.get("name"))


def _check_modalities(value: Any) -> None:
    for i, item in enumerate(value):
        if not _one_of(item, MODALITIES):
            _bad_value(f"modalities[{i}]", item, MODALITIES)


def _enum(name: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if not _one_of(value, ENUMS[name]):
            _bad_value(name, value, ENUMS[name])

    return check


_STRUCTURED: Mapping[str, Callable[[Any], None]] = {
    "seed": _check_seed,
    "logit_bias": _check_logit_bias,
    "metadata": _check_metadata,
    "response_format": _check_response_format,
    "tools": _check_tools,
    "tool_choice": _check_tool_choice,
    "modalities": _check_modalities,
    **{name: _enum(name) for name in ENUMS},
}


def _check_name(param: str, name: Any) -> None:
    if name is None:
        _missing(param)
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidRequest(
            f"Invalid '{param}': {name!r} does not match pattern. Expected a string that "
            "matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.",
            param=param, code="invalid_value",
        )  # fmt: skip


def _bad_value(param: str, value: Any, allowed: frozenset[str], scope: str = "") -> NoReturn:
    supported = ", ".join(f"'{v}'" for v in sorted(allowed))
    shown = f"'{value}'" if isinstance(value, str) else repr(value)
    raise InvalidRequest(
        f"Invalid value: {shown}. Supported values{scope} are: {supported}.",
        param=param, code="invalid_value",
    )  # fmt: skip


def _object(param: str, value: Any) -> dict[str, Any]:
    """``value`` if it is an object; a 400 naming ``param`` otherwise."""
    if value is None:
        _missing(param)
    if not isinstance(value, dict):
        _invalid_type(param, "an object")
    return value


def _too_large(param: str, what: str, expected: str, got: str, code: str) -> NoReturn:
    raise InvalidRequest(
        f"Invalid '{param}': {what}. Expected {expected}, but got {got} instead.",
        param=param, code=code,
    )  # fmt: skip


def _missing(param: str) -> NoReturn:
    raise InvalidRequest(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )


def _invalid_type(param: str, expected: str) -> NoReturn:
    raise InvalidRequest(
        f"Invalid type for '{param}': expected {expected}.", param=param, code="invalid_type"
    )
