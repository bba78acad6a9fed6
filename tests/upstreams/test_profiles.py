"""Each upstream profile against a loopback fake of its server (tests/upstreams/servers.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from hybrid_gateway.config import ChannelConfig
from hybrid_gateway.errors import InvalidRequest
from hybrid_gateway.upstreams.openai_http import OpenAIChannel, UpstreamRejected
from hybrid_gateway.upstreams.profiles import (
    PROFILES,
    Limits,
    ProfileName,
    UnsupportedByUpstream,
    merge_answers,
    plan_request,
    profile_from_models,
)
from tests.upstreams.servers import BEHAVIOURS, Fake, fake_server

PARTS: Any = [{"role": "user", "content": [{"type": "text", "text": "Say"},
                                            {"type": "text", "text": "hello"}]}]  # fmt: skip
USER: Any = [{"role": "user", "content": "hi"}]


def channel(fake: Fake, profile: str = "auto", **extra: Any) -> OpenAIChannel:
    config = ChannelConfig(base_url=fake.url, model="m", profile=ProfileName(profile), **extra)
    return OpenAIChannel("up", config, api_key=None)


@pytest.mark.parametrize("kind", sorted(BEHAVIOURS))
async def test_auto_detects_each_server_once(kind: str) -> None:
    async with fake_server(kind) as fake:
        up = channel(fake)
        assert (await up.profile()).name == kind
        await up.complete({"model": "light", "messages": USER})
        await up.complete({"model": "light", "messages": USER})
        await up.aclose()
    assert fake.model_lists == 1 and len(fake.received) == 2


async def test_auto_falls_back_to_no_rewriting_and_retries_after_a_transport_failure() -> None:
    config = ChannelConfig(base_url="http://127.0.0.1:9/v1", model="m", profile=ProfileName.AUTO,
                           connect_timeout_s=0.5)  # fmt: skip
    up = OpenAIChannel("up", config, api_key=None)
    assert (await up.profile()).name is ProfileName.OPENAI
    assert up._profile is None  # not cached: asked again on the next request
    await up.aclose()


@pytest.mark.parametrize("kind", ["llama_cpp", "ollama", "tgi"])
async def test_max_completion_tokens_reaches_servers_that_read_only_max_tokens(kind: str) -> None:
    async with fake_server(kind) as fake:
        up = channel(fake)
        _, answer = await up.complete({"model": "light", "messages": USER,
                                       "max_completion_tokens": 8})  # fmt: skip
        await up.aclose()
    assert fake.received[0]["max_tokens"] == 8 and "max_completion_tokens" not in fake.received[0]
    assert answer["usage"]["completion_tokens"] == 8


@pytest.mark.parametrize("kind", ["vllm", "sglang", "openai"])
async def test_servers_that_read_max_completion_tokens_get_it_unchanged(kind: str) -> None:
    async with fake_server(kind) as fake:
        up = channel(fake)
        await up.complete({"model": "light", "messages": USER, "max_completion_tokens": 8})
        await up.aclose()
    assert fake.received[0]["max_completion_tokens"] == 8 and "max_tokens" not in fake.received[0]


async def test_text_part_lists_become_one_string_for_llama_cpp() -> None:
    async with fake_server("llama_cpp") as fake:
        up = channel(fake)
        _, answer = await up.complete({"model": "light", "messages": PARTS})
        plain = channel(fake, profile="openai")  # as before profiles: the server's 500
        with pytest.raises(UpstreamRejected, match="can only concatenate"):
            await plain.complete({"model": "light", "messages": PARTS})
        await up.aclose()
        await plain.aclose()
    assert fake.received[0]["messages"] == [{"role": "user", "content": "Say\nhello"}]
    assert answer["choices"][0]["message"]["content"]


@pytest.mark.parametrize("kind", ["llama_cpp", "ollama", "tgi"])
async def test_n_is_answered_by_parallel_calls_merged(kind: str) -> None:
    async with fake_server(kind) as fake:
        up = channel(fake)
        raw, answer = await up.complete({"model": "light", "messages": USER, "n": 3, "seed": 7,
                                         "max_tokens": 5})  # fmt: skip
        await up.aclose()
    assert len(fake.received) == 3 and all("n" not in body for body in fake.received)
    assert sorted(body["seed"] for body in fake.received) == [7, 8, 9]  # three answers, not one
    assert [c["index"] for c in answer["choices"]] == [0, 1, 2]
    assert answer["usage"] == {"prompt_tokens": 30, "completion_tokens": 15, "total_tokens": 45}
    assert orjson.loads(raw) == answer


@pytest.mark.parametrize("kind", ["vllm", "sglang", "openai"])
async def test_n_is_sent_as_is_to_servers_that_implement_it(kind: str) -> None:
    async with fake_server(kind) as fake:
        up = channel(fake)
        _, answer = await up.complete({"model": "light", "messages": USER, "n": 3})
        await up.aclose()
    assert len(fake.received) == 1 and fake.received[0]["n"] == 3
    assert len(answer["choices"]) == 3


async def test_n_is_refused_up_front_when_fan_out_is_off_or_streamed() -> None:
    async with fake_server("llama_cpp") as fake:
        off = channel(fake, fan_out_n=0)
        with pytest.raises(UnsupportedByUpstream) as refused:
            await off.complete({"model": "light", "messages": USER, "n": 2})
        assert (refused.value.param, refused.value.status) == ("n", 400)
        on = channel(fake)
        with pytest.raises(UnsupportedByUpstream):
            async with on.open_stream({"model": "light", "messages": USER, "n": 2}):
                pass
        await off.aclose()
        await on.aclose()
    assert fake.received == []  # nothing was sent


@pytest.mark.parametrize(
    ("kind", "body", "param"),
    [
        ("llama_cpp", {"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ("vllm", {"prediction": {"type": "content", "content": "x"}}, "prediction"),
        ("ollama", {"logit_bias": {"50256": -100}}, "logit_bias"),
        ("tgi", {"logit_bias": {"50256": -100}}, "logit_bias"),
        ("llama_cpp", {"messages": [{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]},
         "messages[0].content[0].type"),
    ],
)  # fmt: skip
async def test_features_a_server_lacks_are_a_400_before_sending(
    kind: str, body: dict[str, Any], param: str
) -> None:
    async with fake_server(kind) as fake:
        up = channel(fake)
        with pytest.raises(UnsupportedByUpstream) as refused:
            await up.complete({"model": "light", "messages": USER, **body})
        await up.aclose()
    assert (refused.value.param, refused.value.status) == (param, 400)
    assert fake.received == []


@pytest.mark.parametrize("name", ["max_tokens", "max_completion_tokens"])
def test_token_limits_above_the_channels_context_are_a_400(name: str) -> None:
    limits = Limits("up", context_tokens=2048)
    profile = PROFILES[ProfileName.OPENAI]
    plan_request(profile, {"messages": USER, name: 2048}, limits, stream=False)
    with pytest.raises(InvalidRequest) as refused:
        plan_request(profile, {"messages": USER, name: 2049}, limits, stream=False)
    assert (refused.value.param, refused.value.code) == (name, "invalid_value")
    assert "2048" in refused.value.message


async def test_llama_cpp_gets_tool_calls_with_empty_content_and_json_schema_as_a_schema() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    body = {"model": "light", "messages": [*USER, call, {"role": "tool", "tool_call_id": "c1",
            "content": "1"}], "response_format": {"type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema}}}  # fmt: skip
    async with fake_server("llama_cpp") as fake:
        up = channel(fake)
        await up.complete(body)
        plain = channel(fake, profile="openai")
        with pytest.raises(UpstreamRejected, match="validation errors"):
            await plain.complete(body)
        await up.aclose()
        await plain.aclose()
    sent = fake.received[0]
    assert sent["messages"][1]["content"] == ""
    assert sent["response_format"] == {"type": "json_object", "schema": schema}


def test_mixed_parts_are_not_flattened() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "what is it"}, image]}]
    plan = plan_request(PROFILES[ProfileName.LLAMA_CPP], {"messages": messages},
                        Limits("up"), stream=False)  # fmt: skip
    assert plan.body["messages"] == messages


def test_merge_keeps_the_first_answers_fields() -> None:
    one = {"id": "a", "model": "m", "choices": [{"index": 0, "message": {"content": "x"}}],
           "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}  # fmt: skip
    two = {**one, "id": "b", "usage": None}
    merged = merge_answers([one, two])
    assert merged["id"] == "a" and [c["index"] for c in merged["choices"]] == [0, 1]
    assert merged["usage"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}


@pytest.mark.parametrize(
    ("body", "headers", "expected"),
    [
        (b'{"data": [{"id": "x", "owned_by": "llamacpp"}]}', {}, ProfileName.LLAMA_CPP),
        (b'{"data": [{"id": "x", "owned_by": "VLLM"}]}', {}, ProfileName.VLLM),
        (b'{"data": [{"id": "x", "owned_by": "someone"}]}', {}, ProfileName.OPENAI),
        (b"<html>not json</html>", {}, ProfileName.OPENAI),
        (b'{"data": "odd"}', {}, ProfileName.OPENAI),
        (b"", {"x-compute-type": "cpu"}, ProfileName.TGI),
    ],
)
def test_detection_from_models_listing(
    body: bytes, headers: dict[str, str], expected: ProfileName
) -> None:
    assert profile_from_models(body, headers) is expected
