"""Tool calls, JSON mode, json_schema and n > 1, as the official SDK sees them."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import jsonschema
import openai
import pytest
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessageFunctionToolCall,
)

from hybrid_gateway.accounting.tokens import count_tokens
from hybrid_gateway.resilience.clock import ManualClock
from tests.tools.test_emulator_server import FAST, MESSAGES, client, get_json, wait_for_stats

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS: Any = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    },
]
PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "pets": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"kind": {"type": "string", "enum": ["cat", "dog"]}},
                "required": ["kind"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["name", "age", "pets"],
    "additionalProperties": False,
}


def parameters(name: str) -> Any:
    return next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)


async def test_tool_call_is_well_formed_and_counted() -> None:
    async with client() as (sdk, url):
        completion = await sdk.chat.completions.create(
            model="light", messages=MESSAGES, tools=TOOLS
        )
        stats = await get_json(f"{url}/stats")
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls or []
    assert len(calls) == 1 and calls[0].type == "function" and calls[0].id.startswith("call_")
    function = calls[0].function
    jsonschema.validate(json.loads(function.arguments), parameters(function.name))
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 1 + count_tokens(function.arguments)
    assert stats["generated_tokens"] == completion.usage.completion_tokens  # the engine made them
    assert completion.usage.prompt_tokens > 40  # the tool definitions count as prompt


async def test_streamed_tool_call_follows_openais_deltas() -> None:
    async with client() as (sdk, _):
        plain = await sdk.chat.completions.create(
            model="light", messages=MESSAGES, tools=TOOLS, tool_choice="required"
        )
        stream = await sdk.chat.completions.create(
            model="light",
            messages=MESSAGES,
            tools=TOOLS,
            tool_choice="required",
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    check_streamed_tool_call(chunks, plain)


def check_streamed_tool_call(chunks: list[ChatCompletionChunk], plain: ChatCompletion) -> None:
    """OpenAI's deltas (role, header, argument fragments, finish, usage), same call as ``plain``."""
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant" and deltas[0].content is None
    header = (deltas[1].tool_calls or [])[0]
    assert header.index == 0 and header.id and header.type == "function"
    assert header.function is not None and header.function.arguments == ""
    fragments = [(d.tool_calls or [])[0] for d in deltas[2:-1]]
    assert all(f.id is None and f.function and f.function.name is None for f in fragments)
    arguments = "".join(f.function.arguments or "" for f in fragments if f.function)
    expected = (plain.choices[0].message.tool_calls or [])[0]
    assert isinstance(expected, ChatCompletionMessageFunctionToolCall)
    assert (header.id, header.function.name) == (expected.id, expected.function.name)
    assert arguments == expected.function.arguments
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].usage is not None and plain.usage is not None
    assert chunks[-1].usage.completion_tokens == 1 + len(fragments) == plain.usage.completion_tokens


async def test_tool_choice_none_named_and_after_a_tool_result() -> None:
    async with client() as (sdk, _):
        none = await sdk.chat.completions.create(
            model="light", messages=MESSAGES, tools=TOOLS, tool_choice="none"
        )
        named = await sdk.chat.completions.create(
            model="light",
            messages=MESSAGES,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "search"}},
        )
        call = (named.choices[0].message.tool_calls or [])[0]
        answered: Any = [
            *MESSAGES,
            {"role": "assistant", "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "12 degrees"},
        ]
        after = await sdk.chat.completions.create(model="light", messages=answered, tools=TOOLS)
    assert none.choices[0].finish_reason == "stop" and none.choices[0].message.content
    assert call.function.name == "search"  # type: ignore[union-attr]
    assert after.choices[0].finish_reason == "stop"
    assert (after.choices[0].message.content or "").startswith("[light] ")


async def test_tool_call_rate_is_a_share_of_prompts_and_fixed_per_prompt() -> None:
    half = replace(FAST, tool_call_rate=0.5)
    calls = []
    async with client(half) as (sdk, _):
        for i in range(60):
            messages: Any = [{"role": "user", "content": f"question number {i}"}]
            first, again = [
                await sdk.chat.completions.create(model="light", messages=messages, tools=TOOLS)
                for _ in range(2)
            ]
            assert first.choices[0].finish_reason == again.choices[0].finish_reason
            calls.append(first.choices[0].finish_reason == "tool_calls")
    assert 15 <= sum(calls) <= 45


async def test_max_tokens_cuts_a_tool_call() -> None:
    async with client() as (sdk, _):
        completion = await sdk.chat.completions.create(
            model="light", messages=MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=4
        )
    choice = completion.choices[0]
    assert choice.finish_reason == "length" and completion.usage is not None
    assert completion.usage.completion_tokens == 4
    call = (choice.message.tool_calls or [])[0]
    assert count_tokens(call.function.arguments) == 3  # type: ignore[union-attr]


async def test_json_object_mode_answers_json() -> None:
    instructions = f"Answer as JSON matching this schema:\n```json\n{json.dumps(PERSON)}\n```"
    with_schema: Any = [{"role": "system", "content": instructions}, MESSAGES[1]]
    async with client() as (sdk, _):
        bare = await sdk.chat.completions.create(
            model="light", messages=MESSAGES, response_format={"type": "json_object"}
        )
        shaped = await sdk.chat.completions.create(
            model="light", messages=with_schema, response_format={"type": "json_object"}
        )
    answer = json.loads(bare.choices[0].message.content or "")
    assert set(answer) == {"answer"} and answer["answer"].startswith("[light] ")
    jsonschema.validate(json.loads(shaped.choices[0].message.content or ""), PERSON)


@pytest.mark.parametrize("stream", [False, True])
async def test_json_schema_answers_an_instance(stream: bool) -> None:
    response_format: Any = {
        "type": "json_schema",
        "json_schema": {"name": "person", "schema": PERSON, "strict": True},
    }
    async with client() as (sdk, url):
        if stream:
            chunks = await sdk.chat.completions.create(
                model="light", messages=MESSAGES, response_format=response_format, stream=True
            )
            content = "".join([c.choices[0].delta.content or "" async for c in chunks])
        else:
            completion = await sdk.chat.completions.create(
                model="light", messages=MESSAGES, response_format=response_format
            )
            content = completion.choices[0].message.content or ""
        stats = await get_json(f"{url}/stats")
    jsonschema.validate(json.loads(content), PERSON)
    assert stats["completion_tokens"] == count_tokens(content)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"n": 0}, "n"),
        ({"n": 129}, "n"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "x"}}},
         "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "f", "strict": True,
                     "parameters": {"type": "object", "properties": {}}}}]}, "tools"),
        ({"response_format": {"type": "json_schema", "json_schema": {
            "name": "p", "strict": True, "schema": {**PERSON, "required": ["name"]}}}},
         "response_format"),
        ({"response_format": {"type": "xml"}}, "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {
            "name": "p", "schema": {"type": "integer", "minimum": "one"}}}}, "response_format"),
    ],
)  # fmt: skip
async def test_what_openai_refuses_is_a_400_naming_the_param(
    extra: dict[str, Any], param: str
) -> None:
    async with client() as (sdk, _):
        with pytest.raises(openai.BadRequestError) as caught:
            await sdk.chat.completions.create(model="light", messages=MESSAGES, extra_body=extra)
    body: Any = caught.value.body
    assert body["param"] == param


async def test_n_choices_each_counted_choice_zero_as_with_n_1() -> None:
    async with client() as (sdk, _):
        single = await sdk.chat.completions.create(model="light", messages=MESSAGES)
        three = await sdk.chat.completions.create(model="light", messages=MESSAGES, n=3)
    assert [c.index for c in three.choices] == [0, 1, 2]
    texts = [c.message.content or "" for c in three.choices]
    assert texts[0] == single.choices[0].message.content
    assert len(set(texts)) == 3
    assert three.usage is not None and single.usage is not None
    assert three.usage.completion_tokens == sum(count_tokens(t) for t in texts)
    assert three.usage.prompt_tokens == single.usage.prompt_tokens


async def test_streamed_n_choices_carry_their_index() -> None:
    async with client() as (sdk, _):
        plain = await sdk.chat.completions.create(model="light", messages=MESSAGES, n=2)
        stream = await sdk.chat.completions.create(
            model="light", messages=MESSAGES, n=2, stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        chunks = [chunk async for chunk in stream]
    texts, finishes = {0: "", 1: ""}, {}
    for chunk in chunks[:-1]:
        (choice,) = chunk.choices
        texts[choice.index] += choice.delta.content or ""
        if choice.finish_reason:
            finishes[choice.index] = choice.finish_reason
    assert texts == {c.index: c.message.content for c in plain.choices}
    assert finishes == {0: "stop", 1: "stop"}
    assert chunks[-1].usage is not None and plain.usage is not None
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens


async def test_n_choices_take_n_batch_slots_and_share_the_prompt() -> None:
    async with client() as (sdk, _):
        usage = (await sdk.chat.completions.create(model="light", messages=MESSAGES, n=4)).usage
    async with client(FAST, ManualClock()) as (sdk, url):
        call = asyncio.create_task(
            sdk.chat.completions.create(model="light", messages=MESSAGES, n=4)
        )
        stats = await wait_for_stats(url, lambda s: s["running"] == 4)
        call.cancel()
        done = await wait_for_stats(url, lambda s: s["running"] == 0)
    assert usage is not None  # the prompt is held once, each choice's tokens once
    assert stats["kv_tokens_used"] == usage.prompt_tokens + usage.completion_tokens
    assert done["cancelled"] == 1 and done["kv_tokens_used"] == 0
