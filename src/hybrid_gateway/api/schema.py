"""Parse and validate a chat completion request body into a ``ChatRequest``.

Hand-written checks rather than a model class: this runs on every request, and each failure
must name the parameter the way the OpenAI API does (``param``), with a message a developer can
act on (the conversation and the structured parameters are checked in ``validation.py``).
Anything not listed in ``KNOWN_PARAMS`` is refused: a parameter the gateway would
silently drop is a bug report waiting to happen.  A body nested deeper than ``MAX_DEPTH``
(a JSON schema in ``response_format`` or a tool's parameters, say) is refused too: ``orjson``
reads 1024 levels but writes only 255, and no real schema comes near 64.
"""

from __future__ import annotations

import math
from collections.abc import Container, Mapping
from typing import Any, NoReturn

import orjson

from hybrid_gateway.api.validation import check_conversation, check_structured
from hybrid_gateway.errors import InvalidRequest
from hybrid_gateway.types import ChatRequest

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})

KNOWN_PARAMS = frozenset(
    {
        "model", "messages", "stream", "stream_options", "temperature", "top_p", "n", "stop",
        "max_tokens", "max_completion_tokens", "presence_penalty", "frequency_penalty",
        "logit_bias", "logprobs", "top_logprobs", "user", "seed", "response_format", "tools",
        "tool_choice", "parallel_tool_calls", "functions", "function_call", "metadata",
        "reasoning_effort", "service_tier", "store", "modalities", "audio", "prediction",
        "top_k", "min_p", "repetition_penalty", "verbosity", "web_search_options",
        "prompt_cache_key", "safety_identifier", "prompt_cache_retention",
        "prompt_cache_options", "moderation",
    }
)  # fmt: skip

# (min, max) for numeric parameters; None = unbounded on that side.
_NUMBER_RANGES: Mapping[str, tuple[float | None, float | None]] = {
    "temperature": (0, 2),
    "top_p": (0, 1),
    "presence_penalty": (-2, 2),
    "frequency_penalty": (-2, 2),
    "min_p": (0, 1),
    "repetition_penalty": (0, None),
}
_INT_RANGES: Mapping[str, tuple[int, int | None]] = {
    "n": (1, 128),
    "max_tokens": (1, None),
    "max_completion_tokens": (1, None),
    "top_logprobs": (0, 20),
    "top_k": (0, None),
}
_TYPED: Mapping[str, tuple[type, ...]] = {
    "user": (str,), "metadata": (dict,), "logit_bias": (dict,), "logprobs": (bool,),
    "response_format": (dict,), "tools": (list,), "tool_choice": (str, dict),
    "parallel_tool_calls": (bool,), "functions": (list,), "function_call": (str, dict),
    "reasoning_effort": (str,), "service_tier": (str,), "store": (bool,), "modalities": (list,),
    "audio": (dict,), "prediction": (dict,), "verbosity": (str,),
    "web_search_options": (dict,), "prompt_cache_key": (str,), "safety_identifier": (str,),
    "prompt_cache_retention": (str,), "prompt_cache_options": (dict,), "moderation": (dict,),
}  # fmt: skip


_CHECKED = frozenset({*_NUMBER_RANGES, *_INT_RANGES, *_TYPED, "seed", "stop"})

# The most levels of objects and arrays a body may nest, the body itself being level 1.
MAX_DEPTH = 64


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(
            f"The request body is not valid JSON: {exc}", code="invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise InvalidRequest(
            f"The request body must be a JSON object, got {_kind(body)}", code="invalid_json"
        )
    if raw.count(b"{") + raw.count(b"[") > MAX_DEPTH:  # else no value can nest deeper
        _check_depth(body)
    return body


def _check_depth(body: dict[str, Any]) -> None:
    """400 naming the top-level field (``tools[0]``) where the body nests past ``MAX_DEPTH``.

    Walked with an explicit stack: Python's own recursion limit is below orjson's 1024."""
    stack: list[tuple[Any, int, str]] = []
    for name, value in body.items():  # the body is level 1; name each top-level field
        if isinstance(value, list):  # messages[3], tools[0]
            stack += [(item, 3, f"{name}[{i}]") for i, item in enumerate(value)]
        else:
            stack.append((value, 2, name))
    while stack:
        value, depth, where = stack.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if not isinstance(value, list):
            continue
        if depth > MAX_DEPTH:
            raise InvalidRequest(
                f"'{where}' is nested more than {MAX_DEPTH} levels deep (objects and arrays, "
                "counting the request body); flatten it or use $ref in a JSON schema.",
                param=where, code="invalid_value",
            )  # fmt: skip
        stack += [(item, depth + 1, where) for item in value]


def reject_unknown(body: Mapping[str, Any], known: Container[str]) -> None:
    """400 ``unsupported_parameter`` naming the first field not in ``known``, as OpenAI does."""
    unknown = [name for name in body if name not in known]
    if unknown:
        raise InvalidRequest(
            f"Unrecognized request argument supplied: {unknown[0]}",
            param=unknown[0],
            code="unsupported_parameter",
        )


def parse_chat_request(body: dict[str, Any]) -> ChatRequest:
    reject_unknown(body, KNOWN_PARAMS)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        _missing_or_wrong("model", model, "a non-empty string")
    _check_messages(body.get("messages"))
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        _wrong("stream", stream, "a boolean")
    include_usage = _stream_options(body.get("stream_options"), bool(stream))
    for name, value in body.items():
        if value is not None and name in _CHECKED:
            _check_param(name, value)
    check_conversation(body["messages"])  # what OpenAI refuses (api/validation.py)
    check_structured(body)
    return ChatRequest(
        model=model, messages=body["messages"], stream=bool(stream),
        include_usage=include_usage, body=body,
    )  # fmt: skip


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list):
        _missing_or_wrong("messages", messages, "a non-empty array of message objects")
    if not messages:
        raise InvalidRequest(
            "'messages' must contain at least one message", param="messages", code="invalid_value"
        )
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            _wrong(where, message, "an object with 'role' and 'content'")
        role = message.get("role")
        if not isinstance(role, str) or role not in ROLES:  # [] is not hashable: a 500
            raise InvalidRequest(
                f"{where}.role must be one of {', '.join(sorted(ROLES))}, got {role!r}",
                param=f"{where}.role",
                code="invalid_value",
            )
        content = message.get("content")
        if content is None:
            if role == "assistant" and (message.get("tool_calls") or message.get("function_call")):
                continue
            _missing_or_wrong(f"{where}.content", content, "a string or an array of parts")
        if not isinstance(content, str | list):
            _wrong(f"{where}.content", content, "a string or an array of content parts")
        if isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                    _wrong(f"{where}.content[{j}]", part, "an object with a 'type'")


def _stream_options(options: Any, stream: bool) -> bool:
    if options is None:
        return False
    if not stream:
        raise InvalidRequest(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            param="stream_options",
            code="invalid_value",
        )
    if not isinstance(options, dict):
        _wrong("stream_options", options, "an object")
    include = options.get("include_usage", False)
    if not isinstance(include, bool):
        _wrong("stream_options.include_usage", include, "a boolean")
    return include


def _check_param(name: str, value: Any) -> None:
    if name in _NUMBER_RANGES:
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            _wrong(name, value, "a number")
        low, high = _NUMBER_RANGES[name]
        if (low is not None and value < low) or (high is not None and value > high):
            _out_of_range(name, value, low, high)
    elif name in _INT_RANGES:
        if isinstance(value, bool) or not isinstance(value, int):
            _wrong(name, value, "an integer")
        low_i, high_i = _INT_RANGES[name]
        if value < low_i or (high_i is not None and value > high_i):
            _out_of_range(name, value, low_i, high_i)
    elif name == "seed":
        if isinstance(value, bool) or not isinstance(value, int):
            _wrong(name, value, "an integer")
    elif name == "stop":
        ok = isinstance(value, str) or (
            isinstance(value, list) and len(value) <= 4 and all(isinstance(s, str) for s in value)
        )
        if not ok:
            _wrong(name, value, "a string or an array of at most 4 strings")
    elif name in _TYPED and not isinstance(value, _TYPED[name]):
        expected = " or ".join(_kind_name(t) for t in _TYPED[name])
        _wrong(name, value, expected)


def _out_of_range(name: str, value: Any, low: float | None, high: float | None) -> NoReturn:
    bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
    raise InvalidRequest(
        f"'{name}' must be {bounds}, got {value!r}", param=name, code="invalid_value"
    )


def _missing_or_wrong(param: str, value: Any, expected: str) -> NoReturn:
    if value is None:
        raise InvalidRequest(
            f"Missing required parameter: '{param}' ({expected}).",
            param=param,
            code="missing_required_parameter",
        )
    _wrong(param, value, expected)


def _wrong(param: str, value: Any, expected: str) -> NoReturn:
    raise InvalidRequest(
        f"Invalid type for '{param}': expected {expected}, but got {_kind(value)}.",
        param=param,
        code="invalid_type",
    )


def _kind(value: Any) -> str:
    return {
        dict: "an object", list: "an array", str: "a string", bool: "a boolean",
        int: "an integer", float: "a number", type(None): "null",
    }.get(type(value), type(value).__name__)  # fmt: skip


def _kind_name(t: type) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        t, t.__name__
    )
