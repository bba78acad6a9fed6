"""What is embedded and what partitions: noise stripped, context fingerprinted, params kept."""

from __future__ import annotations

from typing import Any

from hybrid_gateway.cache.semantic.hygiene import NoiseStripper, semantic_key
from hybrid_gateway.types import ChatRequest

STRIP = NoiseStripper(user_names=["Alice", "Bob"])


def request(messages: list[dict[str, Any]], model: str = "auto", **params: Any) -> ChatRequest:
    body = {"model": model, "messages": messages, **params}
    return ChatRequest(model=model, messages=messages, stream=False, include_usage=False, body=body)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_noise_is_stripped_from_the_question() -> None:
    key = semantic_key(request([user(
        "Hi, I'm Alice. req_8f3k2j9d at 2025-03-01T10:22:33Z: how do I reset my password? "
        "(trace 3f2a9c1e-0b7d-4e5f-9a1b-2c3d4e5f6a7b)"
    )]), STRIP)  # fmt: skip
    assert key is not None
    assert "Alice" not in key.question and "req_" not in key.question
    assert "2025" not in key.question and "3f2a9c1e" not in key.question
    assert "how do I reset my password?" in key.question


def test_bare_dates_and_short_numbers_stay() -> None:
    key = semantic_key(request([user("Is the office open on 2025-05-01? Room 42")]), STRIP)
    assert key is not None and "2025-05-01" in key.question and "42" in key.question


def test_same_question_in_different_conversations_lands_in_different_buckets() -> None:
    a = semantic_key(request([user("Tell me about Marie Curie"),
                              {"role": "assistant", "content": "Marie Curie was..."},
                              user("how old is she?")]), STRIP)  # fmt: skip
    b = semantic_key(request([user("Tell me about Taylor Swift"),
                              {"role": "assistant", "content": "Taylor Swift is..."},
                              user("how old is she?")]), STRIP)  # fmt: skip
    assert a is not None and b is not None
    assert a.question == b.question and a.bucket != b.bucket


def test_noise_in_the_system_prompt_does_not_split_buckets() -> None:
    def system(text: str) -> dict[str, Any]:
        return {"role": "system", "content": text}

    one = semantic_key(request([system("Now: 2025-03-01 10:22:33. User Bob"), user("pay?")]), STRIP)
    two = semantic_key(
        request([system("Now: 2025-03-02 09:00:01. User Alice"), user("pay?")]), STRIP
    )
    assert one is not None and two is not None and one.bucket == two.bucket


def test_answer_changing_params_and_model_split_buckets_others_do_not() -> None:
    base = semantic_key(request([user("q")]), STRIP)
    assert base is not None
    assert semantic_key(request([user("q")], temperature=0.2), STRIP) != base
    assert semantic_key(request([user("q")], model="heavy"), STRIP) != base
    assert (
        semantic_key(request([user("q")], response_format={"type": "json_object"}), STRIP) != base
    )
    assert semantic_key(request([user("q")], user="carol", temperature=1), STRIP) == base


def test_no_key_without_a_final_user_question() -> None:
    assert semantic_key(request([{"role": "assistant", "content": "hi"}]), STRIP) is None
    assert semantic_key(request([user("   ")]), STRIP) is None
