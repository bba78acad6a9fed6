"""What an upstream's error tells the client: its cause, never the channel's credentials."""

from __future__ import annotations

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
