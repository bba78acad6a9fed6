"""Property tests of the request parser: any input is a ChatRequest or a clean 400."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid_gateway.api.schema import parse_body, parse_chat_request
from hybrid_gateway.errors import InvalidRequest
from hybrid_gateway.pipeline.key import request_key
from hybrid_gateway.routing.rules import extract_features
from tests.hardening.strategies import chat_bodies, json_values, valid_bodies

_CODES = {"invalid_json", "missing_required_parameter", "invalid_type", "invalid_value",
          "unsupported_parameter"}  # fmt: skip


@settings(max_examples=300)
@given(st.binary(max_size=200) | json_values().map(orjson.dumps))
def test_any_bytes_parse_to_an_object_or_invalid_json(raw: bytes) -> None:
    try:
        body = parse_body(raw)
    except InvalidRequest as exc:
        assert exc.status == 400 and exc.code == "invalid_json"
    else:
        assert isinstance(body, dict)


@settings(max_examples=300)
@given(chat_bodies())
def test_any_object_is_a_request_or_a_named_400(body: dict[str, Any]) -> None:
    try:
        chat = parse_chat_request(body)
    except InvalidRequest as exc:
        assert exc.status == 400 and exc.code in _CODES
        assert exc.param is not None, "a field error names its parameter"
        assert exc.message
    else:
        # What the pipeline does with a parsed request before any upstream must not fail either.
        assert len(request_key(chat, "t")) == 32
        extract_features(chat.messages)


@settings(max_examples=300)
@given(valid_bodies())
def test_valid_requests_are_accepted(body: dict[str, Any]) -> None:
    chat = parse_chat_request(orjson.loads(orjson.dumps(body)))
    assert chat.model == body["model"] and chat.messages == body["messages"]
    assert len(request_key(chat, "t")) == 32
