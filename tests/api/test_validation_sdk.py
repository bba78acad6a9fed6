"""The gateway accepts what the official SDK can send, read from the SDK's own request types.

``openai.types.chat`` ships TypedDicts for every request parameter and message.  These tests
walk them: every parameter the SDK defines is known to the parser, every content-part type a
role may send (and only those) is accepted for that role, and every value of every enumeration
the SDK defines for a top-level parameter is accepted.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from typing import Any, Literal, Required, Union, get_args, get_origin, get_type_hints

import pytest
from openai.types import chat as sdk
from openai.types.chat import completion_create_params

from hybrid_gateway.api.schema import KNOWN_PARAMS, parse_chat_request
from hybrid_gateway.api.validation import _PART_FIELDS, PART_TYPES
from hybrid_gateway.errors import InvalidRequest

USER: Any = [{"role": "user", "content": "hi"}]
TOOLS: Any = [{"type": "function", "function": {"name": "f"}}]
# Parameters a literal needs beside it to be valid on its own (OpenAI's rules too).
COMPANIONS: dict[str, dict[str, Any]] = {"tool_choice": {"tools": TOOLS}}

ROLES: dict[str, Any] = {
    "system": sdk.ChatCompletionSystemMessageParam,
    "developer": sdk.ChatCompletionDeveloperMessageParam,
    "user": sdk.ChatCompletionUserMessageParam,
    "assistant": sdk.ChatCompletionAssistantMessageParam,
    "tool": sdk.ChatCompletionToolMessageParam,
}
_UNIONS = (Union, types.UnionType)


def hints(typed_dict: Any) -> dict[str, Any]:
    return get_type_hints(typed_dict)


def is_typed_dict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__annotations__")


def members(tp: Any) -> Iterator[Any]:
    """The types inside unions, Optional, Iterable[...], List[...] (not inside TypedDicts)."""
    origin = get_origin(tp)
    if origin in _UNIONS or (origin is not None and origin is not Literal):
        for arg in get_args(tp):
            yield from members(arg)
    else:
        yield tp


def literal_strings(tp: Any) -> set[str]:
    return {
        value for member in members(tp) if get_origin(member) is Literal
        for value in get_args(member) if isinstance(value, str)
    }  # fmt: skip


def part_types(message_param: Any) -> set[str]:
    content = hints(message_param)["content"]
    found: set[str] = set()
    for member in members(content):
        if is_typed_dict(member):
            found |= literal_strings(hints(member)["type"])
    return found


def test_every_parameter_the_sdk_sends_is_known() -> None:
    sdk_params = set(hints(completion_create_params.CompletionCreateParamsBase))
    assert sdk_params - KNOWN_PARAMS == set()


@pytest.mark.parametrize("role", sorted(ROLES))
def test_each_roles_part_types_are_the_sdks(role: str) -> None:
    assert part_types(ROLES[role]) == set(PART_TYPES[role])


def sdk_literals() -> list[tuple[str, str, bool]]:
    """(parameter, value, given as a list) for each top-level literal value the SDK defines."""
    found = []
    for name, tp in hints(completion_create_params.CompletionCreateParamsBase).items():
        for member in members(tp):
            if get_origin(member) is Literal:
                as_list = any(get_origin(a) is list for a in [tp, *get_args(tp)])
                found += [(name, v, as_list) for v in get_args(member) if isinstance(v, str)]
    return found


@pytest.mark.parametrize(("name", "value", "as_list"), sdk_literals())
def test_every_enumeration_value_the_sdk_defines_is_accepted(
    name: str, value: str, as_list: bool
) -> None:
    body = {"model": "auto", "messages": USER, name: [value] if as_list else value,
            **COMPANIONS.get(name, {})}  # fmt: skip
    parse_chat_request(body)


def test_the_sdk_walk_finds_what_it_should() -> None:
    """Guards the walk itself: a change in the SDK's typing layout must not empty it."""
    assert {"reasoning_effort", "service_tier", "tool_choice", "modalities"} <= {
        name for name, _, _ in sdk_literals()
    }
    assert part_types(sdk.ChatCompletionUserMessageParam) >= {"text", "image_url"}


def required_keys(typed_dict: Any) -> set[str]:
    """The keys the SDK marks ``Required`` (``__required_keys__`` is empty under PEP 563)."""
    hinted = get_type_hints(typed_dict, include_extras=True)
    return {key for key, tp in hinted.items() if get_origin(tp) in (Required, typing.Required)}


def part_params() -> dict[str, Any]:
    """Each content-part type the SDK defines -> its TypedDict."""
    found: dict[str, Any] = {}
    for message_param in ROLES.values():
        for member in members(hints(message_param)["content"]):
            if is_typed_dict(member):
                for kind in literal_strings(hints(member)["type"]):
                    found[kind] = member
    return found


@pytest.mark.parametrize("kind", sorted(set().union(*PART_TYPES.values())))
def test_each_part_types_required_payload_is_the_sdks(kind: str) -> None:
    """A part missing what the SDK requires is a 400 naming it; one with it passes."""
    sdk_required = required_keys(part_params()[kind]) - {"type"}
    assert {_PART_FIELDS[kind][0]} == sdk_required or (kind == "file" and not sdk_required)
    role = "assistant" if kind == "refusal" else "user"
    with pytest.raises(InvalidRequest) as refused:
        parse_chat_request({"model": "auto", "messages": [{"role": role, "content": [
            {"type": kind}]}]})  # fmt: skip
    assert refused.value.param == f"messages[0].content[0].{_PART_FIELDS[kind][0]}"


def test_a_tool_messages_required_id_and_a_function_messages_name_are_the_sdks() -> None:
    assert "tool_call_id" in required_keys(sdk.ChatCompletionToolMessageParam)
    assert "name" in required_keys(sdk.ChatCompletionFunctionMessageParam)
