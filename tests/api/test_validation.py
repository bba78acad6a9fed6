"""What OpenAI refuses is refused here too, with the parameter OpenAI names (api/validation.py)."""

from __future__ import annotations

from typing import Any

import pytest

from hybrid_gateway.api.schema import parse_chat_request
from hybrid_gateway.errors import InvalidRequest

USER: Any = {"role": "user", "content": "What is the weather?"}
CALL: Any = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    ],
}
ANSWER: Any = {"role": "tool", "tool_call_id": "call_1", "content": "12 C"}
TOOLS: Any = [{"type": "function", "function": {"name": "weather", "parameters": {}}}]


def refused(messages: list[Any] | None = None, **params: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        parse_chat_request({"model": "auto", "messages": messages or [USER], **params})
    assert info.value.status == 400 and info.value.message
    return info.value


def accepted(messages: list[Any] | None = None, **params: Any) -> None:
    parse_chat_request({"model": "auto", "messages": messages or [USER], **params})


def test_a_tool_conversation_is_accepted() -> None:
    accepted([USER, CALL, ANSWER, {"role": "assistant", "content": "12 C"}], tools=TOOLS,
             tool_choice="auto", parallel_tool_calls=False)  # fmt: skip


@pytest.mark.parametrize(
    ("messages", "param", "code"),
    [
        ([USER, {"role": "tool", "content": "12 C"}], "messages[1].tool_call_id",
         "missing_required_parameter"),
        ([USER, {"role": "tool", "tool_call_id": 5, "content": "12 C"}],
         "messages[1].tool_call_id", "invalid_type"),
        ([USER, ANSWER], "messages[1].role", "invalid_value"),  # nothing called
        ([USER, CALL, {**ANSWER, "tool_call_id": "call_9"}], "messages[2].tool_call_id",
         "invalid_value"),
        ([USER, CALL, ANSWER, ANSWER], "messages[3].tool_call_id", "invalid_value"),  # twice
        ([USER, CALL, USER], "messages[1].role", "invalid_value"),  # call never answered
        ([USER, CALL], "messages[1].role", "invalid_value"),
        ([USER, CALL, {"role": "assistant", "content": "x"}, ANSWER], "messages[1].role",
         "invalid_value"),
        ([USER, {**CALL, "tool_calls": [{"type": "function"}]}], "messages[1].tool_calls[0].id",
         "missing_required_parameter"),
        ([USER, {**CALL, "tool_calls": "call_1"}], "messages[1].tool_calls", "invalid_type"),
        ([{"role": "function", "content": "x"}], "messages[0].name",
         "missing_required_parameter"),
    ],
)  # fmt: skip
def test_tool_messages_must_answer_the_calls_before_them(
    messages: list[Any], param: str, code: str
) -> None:
    err = refused(messages)
    assert (err.param, err.code) == (param, code)


def test_twenty_tool_messages_without_ids_are_each_a_400() -> None:
    """Issue 24's reproduction: these reached llama.cpp, got 500s and opened the breaker."""
    for _ in range(20):
        assert refused([USER, {"role": "tool", "content": "42"}]).param == (
            "messages[1].tool_call_id"
        )


@pytest.mark.parametrize(
    ("message", "param", "code"),
    [
        ({"role": "user", "content": [{"type": "video", "video": {}}]},
         "messages[0].content[0].type", "invalid_value"),
        ({"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
         "messages[0].content[0].type", "invalid_value"),
        ({"role": "user", "content": [{"type": "refusal", "refusal": "no"}]},
         "messages[0].content[0].type", "invalid_value"),
        ({"role": "user", "content": [{"type": "text"}]}, "messages[0].content[0].text",
         "missing_required_parameter"),
        ({"role": "user", "content": [{"type": "text", "text": ["x"]}]},
         "messages[0].content[0].text", "invalid_type"),
        ({"role": "user", "content": [{"type": "image_url", "image_url": {}}]},
         "messages[0].content[0].image_url.url", "missing_required_parameter"),
        ({"role": "user", "content": [{"type": "input_audio", "input_audio": {
            "data": "AAAA", "format": "ogg"}}]}, "messages[0].content[0].input_audio.format",
         "invalid_value"),
    ],
)  # fmt: skip
def test_content_part_types_must_be_known_for_the_role(
    message: dict[str, Any], param: str, code: str
) -> None:
    err = refused([message])
    assert (err.param, err.code) == (param, code)


def test_a_tool_answer_is_text_only() -> None:
    image = {"type": "image_url", "image_url": {"url": "https://x/y.png"}}
    err = refused([USER, CALL, {**ANSWER, "content": [image]}])
    assert (err.param, err.code) == ("messages[2].content[0].type", "invalid_value")
    accepted([USER, CALL, {**ANSWER, "content": [{"type": "text", "text": "12 C"}]}])


def test_every_part_type_a_role_may_send_is_accepted() -> None:
    accepted([
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "developer", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "user", "content": [
            {"type": "text", "text": "what is this"},
            {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "mp3"}},
            {"type": "file", "file": {"file_id": "file-1"}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a cat"},
                                          {"type": "refusal", "refusal": "no more"}]},
        {"role": "user", "content": "thanks"},
    ])  # fmt: skip


@pytest.mark.parametrize(
    ("params", "param", "code"),
    [
        ({"seed": 2**63}, "seed", "integer_above_max_value"),
        ({"seed": -(2**63) - 1}, "seed", "integer_below_min_value"),
        ({"n": 0}, "n", "invalid_value"),
        ({"n": 129}, "n", "invalid_value"),
        ({"temperature": 2.5}, "temperature", "invalid_value"),
        ({"top_p": -0.1}, "top_p", "invalid_value"),
        ({"presence_penalty": 2.1}, "presence_penalty", "invalid_value"),
        ({"frequency_penalty": -3}, "frequency_penalty", "invalid_value"),
        ({"logit_bias": {"hello": 1}}, "logit_bias", "invalid_value"),
        ({"logit_bias": {"50256": 101}}, "logit_bias", "invalid_value"),
        ({"logit_bias": {"50256": True}}, "logit_bias", "invalid_value"),
        ({"top_logprobs": 3}, "top_logprobs", "invalid_value"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "invalid_value"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata",
         "object_above_max_properties"),
        ({"metadata": {"k": 1}}, "metadata.k", "invalid_type"),
        ({"metadata": {"k": "v" * 513}}, "metadata.k", "string_above_max_length"),
        ({"metadata": {"k" * 65: "v"}}, "metadata", "invalid_value"),
        ({"response_format": {"type": "yaml"}}, "response_format.type", "invalid_value"),
        ({"response_format": {}}, "response_format.type", "missing_required_parameter"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema",
         "missing_required_parameter"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "a b"}}},
         "response_format.json_schema.name", "invalid_value"),
        ({"tools": [{"type": "function", "function": {"name": "has space"}}]},
         "tools[0].function.name", "invalid_value"),
        ({"tools": [{"type": "retrieval"}]}, "tools[0].type", "invalid_value"),
        ({"tools": [{"type": "function"}]}, "tools[0].function", "missing_required_parameter"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
         "tools[0].function.parameters", "invalid_type"),
        ({"tools": TOOLS * 129}, "tools", "array_above_max_length"),
        ({"tool_choice": "auto"}, "tool_choice", "invalid_value"),  # no tools
        ({"parallel_tool_calls": True}, "parallel_tool_calls", "invalid_value"),
        ({"tools": TOOLS, "tool_choice": "always"}, "tool_choice", "invalid_value"),
        ({"tools": TOOLS, "tool_choice": {"type": "function"}}, "tool_choice.function",
         "missing_required_parameter"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort", "invalid_value"),
        ({"service_tier": "gold"}, "service_tier", "invalid_value"),
        ({"verbosity": "chatty"}, "verbosity", "invalid_value"),
        ({"modalities": ["text", "video"]}, "modalities[1]", "invalid_value"),
        ({"stop": ["a", 1]}, "stop", "invalid_type"),
    ],
)  # fmt: skip
def test_parameters_out_of_what_openai_accepts(
    params: dict[str, Any], param: str, code: str
) -> None:
    err = refused(**params)
    assert (err.param, err.code) == (param, code)


def test_the_edges_of_each_range_are_accepted() -> None:
    accepted(seed=2**63 - 1, n=128, temperature=2, top_p=0, presence_penalty=-2,
             frequency_penalty=2, logit_bias={"50256": -100, "1": 100.0}, logprobs=True,
             top_logprobs=20, metadata={f"k{i}": "v" * 512 for i in range(16)},
             response_format={"type": "json_schema", "json_schema": {"name": "answer_1"}},
             tools=TOOLS * 128, tool_choice={"type": "function", "function": {"name": "weather"}},
             stop=["a", "b", "c", "d"])  # fmt: skip
    accepted(seed=-(2**63), tools=TOOLS, tool_choice="required",
             response_format={"type": "json_object"})  # fmt: skip


@pytest.mark.parametrize("odd", [[], ["function"], {"function": 1}, 3, None])
@pytest.mark.parametrize(
    ("params", "param"),
    [
        (lambda v: {"tools": [{**TOOLS[0], "type": v}]}, "tools[0].type"),
        (lambda v: {"tool_choice": {"type": v, "function": {"name": "f"}}}, "tool_choice.type"),
        (lambda v: {"response_format": {"type": v}}, "response_format.type"),
        (lambda v: {"modalities": [v]}, "modalities[0]"),
    ],
)
def test_an_enum_given_an_array_or_an_object_is_a_400_not_a_crash(
    odd: Any, params: Any, param: str
) -> None:
    # found by the schema fuzzer: {"tools": [{"type": []}]} was a 500 (unhashable list)
    if odd is None and param in ("tools[0].type", "response_format.type"):
        return  # a missing type: its own message (missing_required_parameter)
    err = refused(**params(odd))
    assert err.param == param and err.code in ("invalid_value", "invalid_type")
    calls = {**CALL, "tool_calls": [{**CALL["tool_calls"][0], "type": odd}]}
    if odd is not None:
        assert refused([USER, calls, ANSWER]).param == "messages[1].tool_calls[0].type"
