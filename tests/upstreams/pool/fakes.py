"""A loopback chat server per endpoint whose answer can be switched: ok, an HTTP status, or a
stream cut after its first event (``cut``) or its first N words (``cut=N``).  A stream sends
``words`` one per event, with ``stream_id`` as its id.  It counts the requests it got."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import orjson
from aiohttp import web
from aiohttp.test_utils import TestServer

ANSWER = {"id": "x", "object": "chat.completion", "model": "m", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}  # fmt: skip


@dataclass
class Replica:
    server: TestServer
    mode: str = "ok"  # ok | status=NNN | cut | cut=N
    chats: int = 0
    words: tuple[str, ...] = ("ok",)
    stream_id: str = "x"
    checks: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/v1"


def _app(replica_ref: list[Replica]) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        replica = replica_ref[0]
        replica.chats += 1
        body = await request.json()
        if replica.mode.startswith("status="):
            status = int(replica.mode.split("=")[1])
            return web.json_response({"error": {"message": "down"}}, status=status)
        if not body.get("stream"):
            return web.json_response(ANSWER)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        cut = 1 if replica.mode == "cut" else None
        if replica.mode.startswith("cut="):
            cut = int(replica.mode.split("=")[1])
        for i, word in enumerate(replica.words):
            if i == cut:
                break
            chunk = {"id": replica.stream_id, "object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": {"content": word}, "finish_reason": None}]}  # fmt: skip
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        if cut is not None:
            assert request.transport is not None
            request.transport.close()
            return response
        end = {"id": replica.stream_id, "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {}, "finish_reason": "stop"}]}  # fmt: skip
        await response.write(b"data: " + orjson.dumps(end) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def health(request: web.Request) -> web.Response:
        replica = replica_ref[0]
        replica.checks += 1
        return web.Response(status=200 if replica.mode == "ok" else 503)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    return app


@asynccontextmanager
async def replicas(n: int) -> AsyncIterator[list[Replica]]:
    async with AsyncExitStack() as stack:
        out = []
        for _ in range(n):
            ref: list[Replica] = []
            server = TestServer(_app(ref), host="127.0.0.1")
            await stack.enter_async_context(server)
            ref.append(Replica(server))
            out.append(ref[0])
        yield out
