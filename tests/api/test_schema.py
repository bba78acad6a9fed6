from __future__ import annotations

from typing import Any

import orjson
import pytest

from hybrid_gateway.api.schema import MAX_DEPTH, parse_body, parse_chat_request
from hybrid_gateway.errors import InvalidRequest

USER = [{"role": "user", "content": "hi"}]


def refused(body: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        parse_chat_request(body)
    return info.value


def test_valid_request() -> None:
    chat = parse_chat_request(
        {
            "model": "auto",
            "messages": USER,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0.2,
        }
    )
    assert chat.model == "auto" and chat.stream and chat.include_usage


@pytest.mark.parametrize("raw", [b"{", b"", b"\xff\xfe", b"[1,2]", b'"text"', b"null"])
def test_body_must_be_a_json_object(raw: bytes) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_body(raw)
    assert info.value.code == "invalid_json"


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"messages": USER}, "model", "missing_required_parameter"),
        ({"model": 3, "messages": USER}, "model", "invalid_type"),
        ({"model": "auto"}, "messages", "missing_required_parameter"),
        ({"model": "auto", "messages": "hi"}, "messages", "invalid_type"),
        ({"model": "auto", "messages": []}, "messages", "invalid_value"),
        ({"model": "auto", "messages": ["hi"]}, "messages[0]", "invalid_type"),
        ({"model": "auto", "messages": [{"role": "boss", "content": "x"}]}, "messages[0].role",
         "invalid_value"),
        ({"model": "auto", "messages": [{"role": "user"}]}, "messages[0].content",
         "missing_required_parameter"),
        ({"model": "auto", "messages": [{"role": "user", "content": 5}]}, "messages[0].content",
         "invalid_type"),
        ({"model": "auto", "messages": [{"role": "user", "content": ["x"]}]},
         "messages[0].content[0]", "invalid_type"),
        ({"model": "auto", "messages": USER, "temperature": "hot"}, "temperature", "invalid_type"),
        ({"model": "auto", "messages": USER, "temperature": 3}, "temperature", "invalid_value"),
        ({"model": "auto", "messages": USER, "max_tokens": 0}, "max_tokens", "invalid_value"),
        ({"model": "auto", "messages": USER, "max_tokens": 1.5}, "max_tokens", "invalid_type"),
        ({"model": "auto", "messages": USER, "n": True}, "n", "invalid_type"),
        ({"model": "auto", "messages": USER, "stop": ["a", "b", "c", "d", "e"]}, "stop",
         "invalid_type"),
        ({"model": "auto", "messages": USER, "stream": "yes"}, "stream", "invalid_type"),
        ({"model": "auto", "messages": USER, "stream_options": {"include_usage": True}},
         "stream_options", "invalid_value"),
        ({"model": "auto", "messages": USER, "stream": True, "stream_options": {
            "include_usage": "y"}}, "stream_options.include_usage", "invalid_type"),
        ({"model": "auto", "messages": USER, "frobnicate": 1}, "frobnicate",
         "unsupported_parameter"),
        ({"model": "auto", "messages": USER, "user": 42}, "user", "invalid_type"),
    ],
)  # fmt: skip
def test_each_bad_input_names_its_parameter(body: dict[str, Any], param: str, code: str) -> None:
    err = refused(body)
    assert (err.param, err.code, err.status) == (param, code, 400)
    assert err.message


def test_assistant_tool_call_without_content_is_fine() -> None:
    messages = [*USER, {"role": "assistant", "content": None, "tool_calls": [{"id": "t"}]},
                {"role": "tool", "tool_call_id": "t", "content": "42"}]  # fmt: skip
    assert parse_chat_request({"model": "auto", "messages": messages}).messages == messages


def test_null_optional_parameters_are_accepted() -> None:
    chat = parse_chat_request({"model": "auto", "messages": USER, "temperature": None,
                               "stop": None, "stream_options": None})  # fmt: skip
    assert not chat.stream


def test_nesting_is_limited_at_max_depth_levels() -> None:
    def body(levels: int) -> bytes:
        value: Any = 1
        for _ in range(levels - 1):  # the body is one level, response_format the next
            value = {"a": value}
        return orjson.dumps({"model": "auto", "messages": USER, "response_format": value})

    assert parse_body(body(MAX_DEPTH))["model"] == "auto"
    with pytest.raises(InvalidRequest) as info:
        parse_body(body(MAX_DEPTH + 1))
    assert (info.value.param, info.value.code, info.value.status) == (
        "response_format", "invalid_value", 400,
    )  # fmt: skip
    empty_array = body(MAX_DEPTH).replace(b'"a":1', b'"a":[]')  # one more level all the same
    with pytest.raises(InvalidRequest):
        parse_body(empty_array)
