"""What an upstream's error tells the client: its cause, never the channel's credentials."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from hybrid_gateway.config import ChannelConfig
from hybrid_gateway.errors import UpstreamUnavailable
from hybrid_gateway.upstreams.openai_http import OpenAIChannel, UpstreamRejected, _scrub

KEY = "sk-live-0123456789abcdef"


@pytest.mark.parametrize(
    ("status", "message", "error"),
    [
        (401, f"invalid token: Bearer {KEY}", UpstreamUnavailable),
        (
            401,
            f"key {KEY[:12]}... is not valid; got Authorization: bearer {KEY}",
            UpstreamUnavailable,
        ),
        (400, f"bad request from {KEY}", UpstreamRejected),
        (500, "proxy: upstream refused token sk-proj-AbCdEf123456789", UpstreamUnavailable),
    ],
)
async def test_an_upstream_error_is_passed_on_without_the_channels_key(
    status: int, message: str, error: type[Exception]
) -> None:
    async def echo(request: web.Request) -> web.Response:
        assert request.headers["Authorization"] == f"Bearer {KEY}"
        body = orjson.dumps({"error": {"message": message}})
        return web.Response(status=status, body=body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", echo)
    async with TestServer(app, host="127.0.0.1") as server:
        config = ChannelConfig(base_url=str(server.make_url("/v1")), model="m")
        channel = OpenAIChannel("heavy", config, api_key=KEY)
        with pytest.raises(error) as exc:
            await channel.complete({"messages": [{"role": "user", "content": "hi"}]})
        await channel.aclose()
    text = str(exc.value)
    assert KEY not in text and "sk-proj-AbCdEf" not in text and "[redacted]" in text
    assert "channel heavy" in text  # the cause still names the channel


def test_ordinary_error_text_stays_readable() -> None:
    """Only credentials are masked: not words after "Bearer", nor a placeholder key's letter."""
    assert _scrub("Bearer authentication is required", "x") == "Bearer authentication is required"
    assert _scrub("'max_tokens' must be at most 4096", "x") == "'max_tokens' must be at most 4096"
    assert _scrub(f"bad key: Bearer {KEY}", None) == "bad key: Bearer [redacted]"


async def test_resize_changes_the_slots_without_cutting_a_request_in_flight() -> None:
    """A reload's new max_concurrency (upstreams/pool/resize.py): fewer slots are taken back as
    requests finish (a request waiting for a slot waits on); more are free at once."""
    answers: asyncio.Queue[None] = asyncio.Queue()  # one item: one held request answers
    arrived = 0

    async def held(request: web.Request) -> web.Response:
        nonlocal arrived
        arrived += 1
        await answers.get()
        body = {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}
        return web.json_response(body)

    async def arrivals(n: int) -> None:
        for _ in range(300):
            if arrived >= n:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # and no more than n
        assert arrived == n

    app = web.Application()
    app.router.add_post("/v1/chat/completions", held)
    body = {"messages": [{"role": "user", "content": "hi"}]}
    async with TestServer(app, host="127.0.0.1") as server:
        config = ChannelConfig(base_url=str(server.make_url("/v1")), model="m",
                               max_concurrency=2, queue_timeout_s=5)  # fmt: skip
        channel = OpenAIChannel("c", config, api_key=None)
        calls = [asyncio.create_task(channel.complete(body)) for _ in range(3)]
        await arrivals(2)  # the third waits for a slot
        channel.resize(1)  # two in flight, one slot now: neither is cut
        answers.put_nowait(None)
        await arrivals(2)  # the slot freed is taken back: the third still waits
        answers.put_nowait(None)
        await arrivals(3)  # one in flight again: the third's turn
        answers.put_nowait(None)
        assert [(await c)[1]["choices"][0]["message"]["content"] for c in calls] == ["ok"] * 3

        channel.resize(1 + 2)  # two more, free at once
        calls = [asyncio.create_task(channel.complete(body)) for _ in range(4)]
        await arrivals(6)  # three at once, the fourth waits
        for _ in range(4):
            answers.put_nowait(None)
        await asyncio.gather(*calls)
        assert channel.config.max_concurrency == 3

        channel.resize(1)  # three free slots, one now: the next request takes two back
        calls = [asyncio.create_task(channel.complete(body)) for _ in range(2)]
        await arrivals(8)
        answers.put_nowait(None)
        await arrivals(9)
        answers.put_nowait(None)
        await asyncio.gather(*calls)
        await channel.aclose()
