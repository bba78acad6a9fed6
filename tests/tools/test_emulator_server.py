"""The emulator over real loopback HTTP, driven by the official OpenAI SDK."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp import web

from hybrid_gateway.accounting.tokens import count_tokens
from hybrid_gateway.resilience.clock import Clock, ManualClock
from hybrid_gateway.tools.emulator import (
    LIGHT,
    EmulatorSettings,
    FaultSettings,
    create_emulator_app,
)

# The light profile with 1 ms steps, so whole answers take ~0.1 s of wall time.
FAST = replace(
    LIGHT,
    engine=replace(LIGHT.engine, decode_step_ms=1.0, prefill_tps=1_000_000.0),
)
MESSAGES: list[Any] = [
    {"role": "system", "content": "You answer questions about the company handbook."},
    {"role": "user", "content": "How many days of annual leave do new employees get?"},
]


@asynccontextmanager
async def serve(settings: EmulatorSettings, clock: Clock | None = None) -> AsyncIterator[str]:
    runner = web.AppRunner(
        create_emulator_app(settings, clock), handler_cancellation=True, access_log=None
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def client(
    settings: EmulatorSettings = FAST, clock: Clock | None = None, timeout: float = 10.0
) -> AsyncIterator[tuple[openai.AsyncOpenAI, str]]:
    async with (
        serve(settings, clock) as url,
        openai.AsyncOpenAI(
            base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=timeout
        ) as sdk,
    ):
        yield sdk, url


async def get_json(url: str) -> Any:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200
        return await response.json()


async def test_plain_completion_has_the_openai_shape() -> None:
    async with client() as (sdk, _):
        completion = await sdk.chat.completions.create(model="light", messages=MESSAGES)
        again = await sdk.chat.completions.create(model="light", messages=MESSAGES)
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-") and completion.id != again.id
    assert completion.model == "light"
    choice = completion.choices[0]
    assert choice.index == 0 and choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    content = choice.message.content or ""
    assert content.startswith("[light] ")
    assert content == again.choices[0].message.content  # deterministic per prompt
    usage = completion.usage
    assert usage is not None
    assert usage.completion_tokens == count_tokens(content)
    assert FAST.min_output_tokens <= usage.completion_tokens <= FAST.max_output_tokens
    assert usage.prompt_tokens == sum(count_tokens(m["content"]) + 3 for m in MESSAGES) + 3
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


async def test_streaming_sends_role_then_tokens_then_finish_then_usage() -> None:
    async with client() as (sdk, _):
        plain = await sdk.chat.completions.create(model="light", messages=MESSAGES)
        stream = await sdk.chat.completions.create(
            model="light",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [c.choices[0].delta.content or "" for c in chunks[1:-2]]
    assert "".join(pieces) == plain.choices[0].message.content
    assert all(c.choices[0].finish_reason is None for c in chunks[:-2])
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and plain.usage is not None
    assert chunks[-1].usage.completion_tokens == len(pieces) == plain.usage.completion_tokens


async def test_streaming_without_include_usage_sends_no_usage_chunk() -> None:
    async with client() as (sdk, _):
        stream = await sdk.chat.completions.create(model="light", messages=MESSAGES, stream=True)
        chunks = [chunk async for chunk in stream]
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)


@pytest.mark.parametrize("cap", ["max_tokens", "max_completion_tokens"])
async def test_token_cap_cuts_the_answer_with_finish_reason_length(cap: str) -> None:
    limits = {cap: 5}
    max_tokens, max_completion_tokens = (
        limits.get("max_tokens"),
        limits.get("max_completion_tokens"),
    )
    async with client() as (sdk, _):
        capped = await sdk.chat.completions.create(
            model="light",
            messages=MESSAGES,
            max_tokens=max_tokens,
            max_completion_tokens=max_completion_tokens,
        )
        stream = await sdk.chat.completions.create(
            model="light",
            messages=MESSAGES,
            stream=True,
            max_tokens=max_tokens,
            max_completion_tokens=max_completion_tokens,
        )
        chunks = [chunk async for chunk in stream]
    assert capped.choices[0].finish_reason == "length"
    assert capped.usage is not None and capped.usage.completion_tokens == 5
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 5
    assert chunks[-1].choices[0].finish_reason == "length"


async def test_sync_client_works_unchanged() -> None:
    async with serve(FAST) as url:

        def call() -> tuple[str, list[str]]:
            with openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as sdk:
                completion = sdk.chat.completions.create(model="light", messages=MESSAGES)
                models = [m.id for m in sdk.models.list()]
            return completion.choices[0].message.content or "", models

        content, models = await asyncio.to_thread(call)
    assert content.startswith("[light] ")
    assert models == ["light"]


async def test_models_health_and_stats() -> None:
    async with client() as (sdk, url):
        models = await sdk.models.list()
        assert [(m.id, m.object) for m in models.data] == [("light", "model")]
        assert await get_json(f"{url}/healthz") == {"status": "ok"}
        assert await get_json(f"{url}/health") == {"status": "ok"}
        await sdk.chat.completions.create(model="light", messages=MESSAGES)
        stats = await get_json(f"{url}/stats")
    assert stats["served"] == 1 and stats["errors"] == 0
    assert (stats["running"], stats["waiting"], stats["kv_tokens_used"]) == (0, 0, 0)
    assert stats["kv_tokens_budget"] == FAST.engine.kv_budget_tokens
    assert stats["completion_tokens"] >= FAST.min_output_tokens


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b'{"model": "light"}', "messages"),
        (b'{"model": "light", "messages": []}', "messages"),
        (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', "max_tokens"),
        (b'{"model": "light@nope", "messages": [{"role": "user", "content": "x"}]}', "model"),
    ],
)
async def test_bad_requests_get_openai_error_json(body: bytes, param: str | None) -> None:
    async with (
        serve(FAST) as url,
        aiohttp.ClientSession() as session,
        session.post(f"{url}/v1/chat/completions", data=body) as response,
    ):
        assert response.status == 400
        error = (await response.json())["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["message"]


async def test_sdk_raises_bad_request_for_missing_messages() -> None:
    async with client() as (sdk, _):
        with pytest.raises(openai.BadRequestError):
            await sdk.chat.completions.create(model="light", messages=[])


async def test_strict_model_answers_404_for_other_names() -> None:
    async with client(replace(FAST, strict_model=True)) as (sdk, _):
        with pytest.raises(openai.NotFoundError):
            await sdk.chat.completions.create(model="gpt-4o", messages=MESSAGES)
        ok = await sdk.chat.completions.create(model="light", messages=MESSAGES)
    assert ok.choices[0].message.content


async def test_a_prompt_larger_than_the_kv_budget_is_a_400() -> None:
    tiny = replace(FAST, engine=replace(FAST.engine, kv_budget_tokens=50))
    async with client(tiny) as (sdk, _):
        with pytest.raises(openai.BadRequestError, match="KV tokens"):
            await sdk.chat.completions.create(model="light", messages=MESSAGES)


async def test_zero_delay_answers_at_once_in_both_modes() -> None:
    settings = replace(LIGHT, zero_delay=True)  # the slow real profile, bypassed
    async with client(settings) as (sdk, url):
        started = time.perf_counter()
        plain = await sdk.chat.completions.create(model="light", messages=MESSAGES)
        stream = await sdk.chat.completions.create(
            model="light", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
        elapsed = time.perf_counter() - started
        stats = await get_json(f"{url}/stats")
    content = plain.choices[0].message.content or ""
    assert content.startswith("[light] answer ")
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == content
    assert chunks[-1].usage is not None and plain.usage is not None
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert elapsed < 1.0
    assert stats["served"] == 2 and stats["steps"] == 0  # the engine never ran


async def test_manual_clock_paces_requests_and_stats_show_the_queue() -> None:
    clock = ManualClock()
    one_slot = replace(FAST, engine=replace(FAST.engine, max_num_seqs=1))
    async with client(one_slot, clock) as (sdk, url):
        calls = [
            asyncio.create_task(sdk.chat.completions.create(model="light", messages=MESSAGES))
            for _ in range(3)
        ]
        stats = await wait_for_stats(url, lambda s: s["running"] + s["waiting"] == 3)
        assert (stats["running"], stats["waiting"]) == (1, 2)
        assert not any(call.done() for call in calls)  # time stands still
        while not all(call.done() for call in calls):
            await clock.advance(0.05)
            await asyncio.sleep(0.001)
        results = await asyncio.gather(*calls)
    assert len({r.choices[0].message.content for r in results}) == 1


async def wait_for_stats(url: str, ready: Any) -> Any:
    for _ in range(500):
        stats = await get_json(f"{url}/stats")
        if ready(stats):
            return stats
        await asyncio.sleep(0.01)
    raise AssertionError(f"stats never became ready: {stats}")


async def test_a_client_that_hangs_up_frees_its_slot() -> None:
    clock = ManualClock()
    async with client(FAST, clock) as (sdk, url):
        call = asyncio.create_task(sdk.chat.completions.create(model="light", messages=MESSAGES))
        await wait_for_stats(url, lambda s: s["running"] == 1)
        call.cancel()
        stats = await wait_for_stats(url, lambda s: s["running"] == 0)
    assert stats["cancelled"] == 1 and stats["kv_tokens_used"] == 0
    with pytest.raises(asyncio.CancelledError):
        await call


# -- scripted and random faults, as the SDK sees them ---------------------------------------


@pytest.mark.parametrize(
    ("status", "error_class"),
    [
        (502, openai.InternalServerError),
        (503, openai.InternalServerError),
        (429, openai.RateLimitError),
        (401, openai.AuthenticationError),
    ],
)
async def test_scripted_status(status: int, error_class: type[openai.APIStatusError]) -> None:
    async with client() as (sdk, _):
        for stream in (False, True):
            with pytest.raises(error_class) as caught:
                await sdk.chat.completions.create(
                    model=f"light@status={status}", messages=MESSAGES, stream=stream
                )
            assert caught.value.status_code == status
            body: Any = caught.value.body
            assert body["code"] == "emulated_fault" and body["message"]


@pytest.mark.parametrize("stream", [False, True])
async def test_scripted_reset_drops_the_connection(stream: bool) -> None:
    async with client() as (sdk, _):
        with pytest.raises(openai.APIConnectionError):
            await sdk.chat.completions.create(model="light@reset", messages=MESSAGES, stream=stream)
        ok = await sdk.chat.completions.create(model="light", messages=MESSAGES)
    assert ok.choices[0].message.content  # the server is fine afterwards


async def test_midstream_reset_sends_some_chunks_then_drops() -> None:
    received: list[str] = []
    async with client() as (sdk, _):
        stream = await sdk.chat.completions.create(
            model="light@midstream-reset", messages=MESSAGES, stream=True
        )
        with pytest.raises(openai.APIConnectionError):
            async for chunk in stream:
                received.append(chunk.choices[0].delta.content or "")
        with pytest.raises(openai.APIConnectionError):
            await sdk.chat.completions.create(model="light@midstream-reset", messages=MESSAGES)
    assert len(received) == 4  # the role chunk and three tokens
    assert "".join(received).startswith("[light")


async def test_stall_delays_the_first_byte_and_trips_client_timeouts() -> None:
    async with client(timeout=0.2) as (sdk, _):
        with pytest.raises(openai.APITimeoutError):
            await sdk.chat.completions.create(model="light@stall=0.5", messages=MESSAGES)
    async with client() as (sdk, _):
        started = time.perf_counter()
        await sdk.chat.completions.create(model="light@stall=0.3", messages=MESSAGES)
        assert time.perf_counter() - started >= 0.3


async def test_slow_spaces_out_streamed_tokens() -> None:
    async with client() as (sdk, _):
        stream = await sdk.chat.completions.create(
            model="light@slow=0.02", messages=MESSAGES, stream=True, max_tokens=6
        )
        stamps = [time.perf_counter() async for _ in stream]
    gaps = [b - a for a, b in itertools.pairwise(stamps[1:7])]  # between content chunks
    assert min(gaps) >= 0.015


async def test_fail_first_then_recover() -> None:
    async with client() as (sdk, _):
        with pytest.raises(openai.InternalServerError):
            await sdk.chat.completions.create(model="light@fail-first=1", messages=MESSAGES)
        ok = await sdk.chat.completions.create(model="light@fail-first=1", messages=MESSAGES)
        with pytest.raises(openai.APIConnectionError):  # another name has its own count
            await sdk.chat.completions.create(model="light@fail-first=1@reset", messages=MESSAGES)
    assert ok.model == "light@fail-first=1"  # the full requested name is echoed
    assert ok.choices[0].finish_reason == "stop"


async def test_random_errors_use_the_configured_status() -> None:
    always = replace(FAST, faults=FaultSettings(error_rate=1.0, error_status=500))
    async with client(always) as (sdk, _):
        for _ in range(3):
            with pytest.raises(openai.InternalServerError) as caught:
                await sdk.chat.completions.create(model="light", messages=MESSAGES)
            assert caught.value.status_code == 500


async def test_random_resets() -> None:
    always = replace(FAST, faults=FaultSettings(reset_rate=1.0))
    async with client(always) as (sdk, _):
        with pytest.raises(openai.APIConnectionError):
            await sdk.chat.completions.create(model="light", messages=MESSAGES)


async def test_random_faults_are_reproducible_from_the_seed() -> None:
    async def outcomes(seed: int) -> list[str]:
        flaky = replace(FAST, zero_delay=True, faults=FaultSettings(error_rate=0.5, seed=seed))
        results: list[str] = []
        async with client(flaky) as (sdk, _):
            for _ in range(16):
                try:
                    await sdk.chat.completions.create(model="light", messages=MESSAGES)
                    results.append("ok")
                except openai.InternalServerError:
                    results.append("503")
        return results

    first = await outcomes(3)
    assert first == await outcomes(3)
    assert {"ok", "503"} == set(first)


async def test_a_stream_closed_midway_frees_its_slot() -> None:
    clock = ManualClock()
    async with client(FAST, clock) as (sdk, url):
        opening = asyncio.create_task(
            sdk.chat.completions.create(model="light", messages=MESSAGES, stream=True)
        )
        await wait_for_stats(url, lambda s: s["running"] == 1)
        await clock.advance(0.01)  # a few tokens: the response has started
        stream = await opening
        first = await stream.__anext__()
        assert first.choices[0].delta.role == "assistant"
        await stream.close()
        stats = await wait_for_stats(url, lambda s: s["running"] == 0)
    assert stats["cancelled"] == 1 and stats["served"] == 0
