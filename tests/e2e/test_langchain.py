"""Agent frameworks on the `make demo` setup: LangChain and the openai SDK through the gateway.

The gateway runs examples/gateway.yaml as `make demo` does (its channels pointed at two real
emulator processes, light and heavy, on free ports), and clients ask what agent frameworks ask:
tool calls (plain and streamed), structured output by function calling, JSON mode and JSON
schema, and ``n = 2``.  "Any OpenAI SDK works unchanged" (README) is what is tested.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
import yaml
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.output_parsers import PydanticOutputParser
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field, SecretStr

from hybrid_gateway.config import load_config
from tests.e2e.stack import Gateway, emulator, gateway, write_config
from tests.tools.test_emulator_structured import WEATHER, check_streamed_tool_call

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gateway.yaml"
QUESTION = "What is the weather in Paris this week?"


class Pet(BaseModel):
    kind: str = Field(description="cat, dog, ...")
    name: str


class Person(BaseModel):
    """A person mentioned in the text."""

    name: str
    age: int = Field(ge=0, le=120)
    pets: list[Pet]


@tool
def get_weather(city: str, unit: str = "celsius") -> str:
    """The weather forecast for a city."""
    return f"12 degrees {unit} in {city}"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """The example config with its channels on two emulators, as `hybrid-gateway demo` runs it."""
    folder = tmp_path_factory.mktemp("demo")
    config = load_config(EXAMPLE)
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    names = {lane: config.lanes[lane].channel for lane in ("light", "heavy")}
    with (
        emulator(folder, "light-emu", "--profile", "light", "--model",
                 config.channels[names["light"]].model) as light,
        emulator(folder, "heavy-emu", "--profile", "heavy", "--model",
                 config.channels[names["heavy"]].model) as heavy,
    ):  # fmt: skip
        data["channels"][names["light"]]["base_url"] = light.url + "/v1"
        data["channels"][names["heavy"]]["base_url"] = heavy.url + "/v1"
        data["server"]["port"] = 0
        data["server"]["request_log"]["path"] = str(folder / "requests.sqlite3")
        with gateway(write_config(folder / "gateway.yaml", data)) as running:
            yield running


def chat(demo: Gateway, model: str = "auto") -> ChatOpenAI:
    key = SecretStr("demo")
    return ChatOpenAI(model=model, base_url=demo.base_url, api_key=key, max_retries=0, timeout=60)


def test_bind_tools_calls_the_tool_then_answers_its_result(demo: Gateway) -> None:
    llm = chat(demo).bind_tools([get_weather])
    question = HumanMessage(QUESTION)
    first = llm.invoke([question])
    assert isinstance(first, AIMessage) and first.invalid_tool_calls == []
    (call,) = first.tool_calls
    assert call["name"] == "get_weather" and call["id"]
    result = get_weather.invoke(call)  # the tool validates its arguments and runs
    assert isinstance(result, ToolMessage) and result.tool_call_id == call["id"]
    answer = llm.invoke([question, first, result])
    assert isinstance(answer, AIMessage) and answer.tool_calls == []
    assert isinstance(answer.content, str) and answer.content


def test_bind_tools_streams_the_same_call(demo: Gateway) -> None:
    llm = chat(demo).bind_tools([get_weather])
    whole = llm.invoke(QUESTION)
    chunks = list(llm.stream(QUESTION))
    assert len(chunks) > 3 and all(isinstance(c, AIMessageChunk) for c in chunks)
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged += chunk  # type: ignore[assignment]
    assert isinstance(merged, AIMessageChunk) and isinstance(whole, AIMessage)
    assert merged.tool_calls == whole.tool_calls and merged.invalid_tool_calls == []


@pytest.mark.parametrize("method", ["function_calling", "json_mode", "json_schema"])
def test_with_structured_output(demo: Gateway, method: str) -> None:
    structured = chat(demo).with_structured_output(Person, method=method)  # type: ignore[arg-type]
    messages: list[Any] = [HumanMessage("Alice is 34 and has a cat named Tom.")]
    if method == "json_mode":  # JSON mode needs the schema in the prompt (LangChain's docs)
        instructions = PydanticOutputParser(pydantic_object=Person).get_format_instructions()
        messages.insert(0, SystemMessage(instructions))
    person = structured.invoke(messages)
    assert isinstance(person, Person)
    assert 0 <= person.age <= 120 and person.pets and person.name


@pytest.fixture(scope="module")
def sdk(demo: Gateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=demo.base_url, api_key="demo", max_retries=0, timeout=60) as c:
        yield c


def test_n_2_through_the_gateway(sdk: openai.OpenAI) -> None:
    messages: Any = [{"role": "user", "content": "Name two colours."}]
    plain = sdk.chat.completions.create(model="light", messages=messages, n=2)
    assert [c.index for c in plain.choices] == [0, 1]
    texts = [c.message.content or "" for c in plain.choices]
    assert all(texts) and texts[0] != texts[1]
    stream = sdk.chat.completions.create(
        model="light", messages=messages, n=2, stream=True, stream_options={"include_usage": True}
    )
    streamed = {0: "", 1: ""}
    chunks = list(stream)
    for chunk in chunks:
        for choice in chunk.choices:
            streamed[choice.index] += choice.delta.content or ""
    assert streamed == {0: texts[0], 1: texts[1]}
    assert chunks[-1].usage is not None and plain.usage is not None
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens


def test_streamed_tool_call_through_the_gateway(sdk: openai.OpenAI) -> None:
    tools: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
    messages: Any = [{"role": "user", "content": QUESTION}]
    plain = sdk.chat.completions.create(
        model="auto", messages=messages, tools=tools, tool_choice="required"
    )
    stream = sdk.chat.completions.create(
        model="auto", messages=messages, tools=tools, tool_choice="required", stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    check_streamed_tool_call(list(stream), plain)
    call = (plain.choices[0].message.tool_calls or [])[0]
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)  # type: ignore[union-attr]
