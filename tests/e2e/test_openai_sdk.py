"""The official OpenAI SDK, sync and async, against a real gateway in front of real emulators."""

from __future__ import annotations

import sqlite3
import time
import uuid
from typing import Any

import openai
import pytest

from tests.e2e.stack import Gateway


def unique(text: str) -> str:
    return f"{text} [{uuid.uuid4().hex[:8]}]"


def test_non_streaming_answer_and_decision_headers(stack: Gateway, sdk: openai.OpenAI) -> None:
    question = unique("What is RAG?")
    raw = sdk.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": question}], max_tokens=24
    )
    completion = raw.parse()
    assert completion.choices[0].message.content
    assert completion.choices[0].finish_reason in {"stop", "length"}
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    headers = raw.headers
    assert headers["x-request-id"].startswith("req_")
    assert headers["x-gateway-route"] == "lane=light; channel=light-emu; rule=short-single-turn"
    assert headers["x-gateway-cache"] == "miss"
    assert float(headers["x-gateway-cost-usd"]) > 0


def test_exact_cache_hits_ignore_user_and_miss_on_other_params(
    stack: Gateway, sdk: openai.OpenAI
) -> None:
    messages: Any = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": unique("How do I install the CLI?")}]  # fmt: skip

    def ask(**kw: Any) -> tuple[str, str, str]:
        raw = sdk.chat.completions.with_raw_response.create(
            model="auto",
            messages=kw.pop("messages", messages),
            max_tokens=16,
            **kw,
        )
        return raw.headers["x-gateway-cache"], raw.headers["x-gateway-cost-usd"], raw.text

    first = ask(user="alice")
    assert first[0] == "miss"
    again = ask(user="bob")
    assert again[0] == "exact" and float(again[1]) == 0 and again[2] == first[2]
    assert ask(temperature=0.3)[0] == "miss"
    other_system = [{"role": "system", "content": "Be detailed."}, messages[1]]
    assert ask(messages=other_system)[0] == "miss"


async def test_async_streaming_with_usage(stack: Gateway) -> None:
    sdk = openai.AsyncOpenAI(base_url=stack.base_url, api_key="x", max_retries=0, timeout=30)
    stream = await sdk.chat.completions.create(
        model="auto",
        messages=[{"role": "user", "content": unique("Name three colours.")}],
        max_tokens=20,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces: list[str] = []
    usage = None
    finish = None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    await sdk.close()
    assert "".join(pieces).strip()
    assert finish in {"stop", "length"}
    assert usage is not None and usage.completion_tokens > 0


def test_sync_stream_without_usage_then_cached(stack: Gateway, sdk: openai.OpenAI) -> None:
    question = unique("Explain the difference between TCP and UDP in depth.")
    messages: Any = [{"role": "user", "content": question}]
    with sdk.chat.completions.with_streaming_response.create(
        model="auto",
        messages=messages,
        max_tokens=12,
        stream=True,
    ) as response:
        assert response.headers["x-gateway-route"].startswith("lane=heavy; channel=heavy-emu")
        assert response.headers["x-gateway-cost-usd"] == "pending"
        chunks = list(response.parse())
    assert all(chunk.usage is None for chunk in chunks)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed
    # The stream was received in full, so it was cached: the same question now hits.
    raw = sdk.chat.completions.with_raw_response.create(
        model="auto",
        messages=messages,
        max_tokens=12,
    )
    assert raw.headers["x-gateway-cache"] == "exact"
    assert raw.parse().choices[0].message.content == streamed


def test_models_list_and_retrieve(stack: Gateway, sdk: openai.OpenAI) -> None:
    ids = [m.id for m in sdk.models.list()]
    assert ids[:3] == ["auto", "light", "heavy"]
    assert sdk.models.retrieve("auto").id == "auto"
    with pytest.raises(openai.NotFoundError):
        sdk.models.retrieve("gpt-9")


def test_request_log_records_the_decision(stack: Gateway, sdk: openai.OpenAI) -> None:
    raw = sdk.chat.completions.with_raw_response.create(
        model="heavy", messages=[{"role": "user", "content": unique("hello")}], max_tokens=8
    )
    request_id = raw.headers["x-request-id"]
    log_path = stack.config_path.parent / "requests.sqlite3"
    row = None
    deadline = time.monotonic() + 10
    while row is None and time.monotonic() < deadline:
        with sqlite3.connect(log_path) as db:
            row = db.execute(
                "SELECT lane, channel, rule, cache, status, prompt_tokens, cost_usd "
                "FROM requests WHERE request_id = ?",
                (request_id,),
            ).fetchone()
        time.sleep(0.05)
    assert row is not None
    lane, channel, rule, cache, status, prompt_tokens, cost = row
    assert (lane, channel, rule, cache, status) == (
        "heavy",
        "heavy-emu",
        "model:heavy",
        "miss",
        200,
    )
    assert prompt_tokens > 0 and cost > 0
