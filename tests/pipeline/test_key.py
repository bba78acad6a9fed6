from __future__ import annotations

from typing import Any

from hybrid_gateway.api.schema import parse_chat_request
from hybrid_gateway.pipeline.key import request_key
from hybrid_gateway.types import ChatRequest


def key(namespace: str = "t1", **body: Any) -> str:
    body.setdefault("model", "auto")
    body.setdefault("messages", [{"role": "user", "content": "What is RAG?"}])
    return request_key(parse_chat_request(body), namespace)


def test_non_semantic_fields_do_not_change_the_key() -> None:
    base = key()
    assert key(user="alice") == base
    assert key(metadata={"request_id": "r-123", "ts": "2026-11-29T10:00:00Z"}) == base
    assert key(stream=True) == base
    assert key(stream=True, stream_options={"include_usage": True}) == base


def test_defaults_equal_omitted_and_numbers_normalised() -> None:
    base = key()
    assert key(temperature=1) == base
    assert key(temperature=1.0, top_p=1, n=1, presence_penalty=0) == base
    assert key(temperature=0) == key(temperature=0.0)


def test_single_text_part_equals_plain_string() -> None:
    parts = [{"role": "user", "content": [{"type": "text", "text": "What is RAG?"}]}]
    assert key(messages=parts) == key()


def test_answer_changing_inputs_change_the_key() -> None:
    base = key()
    different = {
        key(temperature=0.2),
        key(max_tokens=50),
        key(seed=7),
        key(stop=["\n"]),
        key(model="heavy"),
        key(namespace="t2"),
        key(messages=[{"role": "user", "content": "What is RAG? "}]),
        key(
            messages=[
                {"role": "system", "content": "Answer in French."},
                {"role": "user", "content": "What is RAG?"},
            ]
        ),
        key(
            messages=[
                {"role": "system", "content": "Answer in German."},
                {"role": "user", "content": "What is RAG?"},
            ]
        ),
    }
    assert base not in different
    assert len(different) == 9


def test_key_shape() -> None:
    k = key()
    assert len(k) == 32 and int(k, 16) >= 0


def nested(depth: int, leaf: Any = "x") -> Any:
    value = leaf
    for _ in range(depth):
        value = {"type": "object", "properties": {"p": value}}
    return value


def test_a_request_nested_past_orjsons_limit_still_gets_a_key() -> None:
    """The API refuses such bodies; a request built elsewhere must not raise all the same."""
    messages = [{"role": "user", "content": "What is RAG?"}]

    def deep(leaf: Any, **extra: Any) -> str:
        schema = {"type": "json_schema", "json_schema": {"schema": nested(200, leaf)}}
        body = {"model": "auto", "messages": messages, "response_format": schema, **extra}
        return request_key(ChatRequest("auto", messages, False, False, body), "t1")

    first = deep("x")
    assert len(first) == 32 and int(first, 16) >= 0
    assert deep("x") == first == deep("x", user="alice")
    assert len({first, deep("y"), deep(["x"]), deep({"x": 1}), deep("x", temperature=0.2)}) == 5
