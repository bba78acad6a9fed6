"""Loopback OpenAI-style upstreams for the audit tests: answer, stall or fail, on demand."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from aiohttp import web
from aiohttp.test_utils import TestServer


class Upstream:
    """``mode``: ``answer`` (``text``, non-streamed or streamed), ``stall`` (never answers),
    ``fail`` (500)."""

    def __init__(self, text: str, mode: str = "answer") -> None:
        self.text = text
        self.mode = mode
        self.bodies: list[dict[str, Any]] = []
        self._never = asyncio.Event()

    def release(self) -> None:
        """Let stalled requests finish (the server is closing)."""
        self._never.set()

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        if self.mode == "stall":
            await self._never.wait()
        if self.mode == "fail":
            return web.json_response({"error": {"message": "boom"}}, status=500)
        usage = {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}
        if not body.get("stream"):
            return web.json_response({
                "id": "c1", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": self.text}}],
                "usage": usage,
            })  # fmt: skip
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                 "choices": [{"index": 0, "delta": {"role": "assistant", "content": self.text},
                              "finish_reason": "stop"}]}  # fmt: skip
        await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        last = {**chunk, "choices": [], "usage": usage}
        await response.write(b"data: " + orjson.dumps(last) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response


@asynccontextmanager
async def serving(upstream: Upstream) -> AsyncIterator[str]:
    """The upstream on a loopback port; yields its base URL."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", upstream.chat)
    server = TestServer(app)
    await server.start_server()
    try:
        yield str(server.make_url("/v1"))
    finally:
        upstream.release()
        await server.close()
