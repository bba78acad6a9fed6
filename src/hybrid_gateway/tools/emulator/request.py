"""Parse a chat completion request into what the emulator acts on, or refuse it with a 400.

Beyond the prompt and the length cap, a request can ask for ``n`` choices, offer ``tools``
(with ``tool_choice``) and constrain the answer with ``response_format`` (``json_object`` or
``json_schema``).  What OpenAI refuses here is refused the same way: a ``tool_choice`` without
tools or naming an unknown one, ``n`` outside 1..128, a ``strict`` schema that leaves
``additionalProperties`` open or a property out of ``required``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import orjson

from hybrid_gateway.accounting.tokens import count_tokens

from .instances import SchemaError, check_strict
from .text import Prompt

MAX_N = 128
TOOL_CHOICES = frozenset({"none", "auto", "required"})


class BadRequestError(ValueError):
    """The request body is not a valid chat completion request (HTTP 400)."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass(frozen=True, slots=True)
class Tool:
    """One function the model may call; ``parameters`` is its JSON schema."""

    name: str
    parameters: Any


@dataclass(frozen=True, slots=True)
class ChatCall:
    """The parts of a chat completion request the emulator acts on."""

    model: str
    prompt: Prompt
    max_tokens: int | None
    stream: bool
    include_usage: bool
    n: int = 1
    tools: tuple[Tool, ...] = ()
    tool_choice: str = "auto"  # none | auto | required | function (then ``forced_tool``)
    forced_tool: str | None = None
    after_tool: bool = False  # the last message is a tool result
    json_mode: bool = False  # response_format json_object
    json_schema: Any = None  # response_format json_schema: the schema

    @property
    def plain(self) -> bool:
        """One text choice, no tools, no format: the fast path."""
        return self.n == 1 and not self.tools and not self.json_mode and self.json_schema is None


def parse_chat_call(raw: bytes, default_model: str) -> ChatCall:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequestError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequestError("request body must be a JSON object")
    model = body.get("model", default_model)
    if not isinstance(model, str) or not model:
        raise BadRequestError("'model' must be a non-empty string", param="model")
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise BadRequestError("'stream' must be a boolean", param="stream")
    options = body.get("stream_options") or {}
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    messages = body.get("messages")
    call = ChatCall(
        model=model,
        prompt=Prompt.from_contents(_contents(messages)),
        max_tokens=_max_tokens(body),
        stream=stream,
        include_usage=include_usage,
        n=_n(body.get("n")),
    )
    if all(body.get(key) is None for key in ("tools", "tool_choice", "response_format")):
        return call
    return _with_features(call, body, messages)


def _with_features(call: ChatCall, body: dict[str, Any], messages: Any) -> ChatCall:
    tools = _tools(body.get("tools"))
    choice, forced = _tool_choice(body.get("tool_choice"), tools)
    json_mode, schema = _response_format(body.get("response_format"))
    extra = count_tokens(orjson.dumps(body["tools"]).decode()) if tools else 0
    return replace(
        call,
        prompt=replace(call.prompt, tokens=call.prompt.tokens + extra),
        tools=tools,
        tool_choice=choice,
        forced_tool=forced,
        after_tool=messages[-1].get("role") == "tool",
        json_mode=json_mode,
        json_schema=schema,
    )


def _n(value: Any) -> int:
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_N:
        raise BadRequestError(f"'n' must be an integer from 1 to {MAX_N}", param="n")
    return value


def _tools(value: Any) -> tuple[Tool, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise BadRequestError("'tools' must be an array", param="tools")
    tools: list[Tool] = []
    for i, tool in enumerate(value):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(tool, dict)
            or tool.get("type") != "function"
            or not isinstance(function, dict)
        ):
            raise BadRequestError(
                f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}", "tools"
            )
        name, parameters = function.get("name"), function.get("parameters", {})
        if not isinstance(name, str) or not name:
            raise BadRequestError(f"tools[{i}].function.name must be a string", "tools")
        if not isinstance(parameters, dict):
            raise BadRequestError(f"tools[{i}].function.parameters must be an object", "tools")
        if function.get("strict") is True:
            _strict(parameters, f"function '{name}'", "tools")
        tools.append(Tool(name, parameters))
    return tuple(tools)


def _tool_choice(value: Any, tools: tuple[Tool, ...]) -> tuple[str, str | None]:
    if value is None:
        return ("auto" if tools else "none"), None
    if not tools:
        raise BadRequestError(
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are "
            "specified.",
            param="tool_choice",
        )
    if isinstance(value, str) and value in TOOL_CHOICES:
        return value, None
    function = value.get("function") if isinstance(value, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise BadRequestError(
            "'tool_choice' must be 'none', 'auto', 'required' or "
            "{'type': 'function', 'function': {'name': ...}}",
            param="tool_choice",
        )
    if name not in {tool.name for tool in tools}:
        raise BadRequestError(
            f"Invalid value for 'tool_choice': no function named '{name}' was specified in "
            "the 'tools' parameter.",
            param="tool_choice",
        )
    return "function", name


def _response_format(value: Any) -> tuple[bool, Any]:
    """``(json_mode, schema)``; ``(False, None)`` for plain text."""
    if value is None:
        return False, None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return False, None
    if kind == "json_object":
        return True, None
    spec = value.get("json_schema") if kind == "json_schema" else None
    if not isinstance(spec, dict):
        raise BadRequestError(
            "'response_format' must be {'type': 'text' | 'json_object'} or "
            "{'type': 'json_schema', 'json_schema': {'name': ..., 'schema': {...}}}",
            param="response_format",
        )
    schema = spec.get("schema", {})
    if not isinstance(spec.get("name"), str) or not isinstance(schema, dict):
        raise BadRequestError(
            "'response_format.json_schema' needs a string 'name' and an object 'schema'",
            param="response_format",
        )
    if spec.get("strict") is True:
        _strict(schema, f"response_format '{spec['name']}'", "response_format")
    return False, schema


def _strict(schema: dict[str, Any], where: str, param: str) -> None:
    try:
        check_strict(schema, where)
    except SchemaError as exc:
        raise BadRequestError(str(exc), param=param, code="invalid_json_schema") from None


def _contents(messages: Any) -> list[tuple[str, str]]:
    if not isinstance(messages, list) or not messages:
        raise BadRequestError("'messages' must be a non-empty array", param="messages")
    contents: list[tuple[str, str]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequestError(f"messages[{i}] must be an object with a 'role'", "messages")
        text = _text(message.get("content"), i) + _calls_text(message.get("tool_calls"))
        contents.append((message["role"], text))
    return contents


def _text(content: Any, index: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):  # content parts: keep the text ones
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    raise BadRequestError(f"messages[{index}].content must be a string or an array", "messages")


def _calls_text(calls: Any) -> str:
    """An assistant's earlier tool calls, as the model reads them back in the prompt."""
    if not isinstance(calls, list):
        return ""
    functions = (c.get("function") for c in calls if isinstance(c, dict))
    return "".join(
        f"\n{f.get('name')}({f.get('arguments')})" for f in functions if isinstance(f, dict)
    )


def _max_tokens(body: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadRequestError(f"'{key}' must be a positive integer", param=key)
        return value
    return None
