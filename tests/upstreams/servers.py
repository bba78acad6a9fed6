"""Loopback fakes of each upstream server, built from what each one is known to do.

Each fake answers ``GET /v1/models`` as that server does (the ``owned_by`` it reports, and the
headers it sends) and ``POST /v1/chat/completions`` with that server's quirks:

    llama-cpp-python 0.3  owned_by "me", reports the GGUF path as its model, ignores ``n`` and
                          ``max_completion_tokens``, answers a list of text parts with HTTP 500
                          "can only concatenate str (not "list") to str", and an assistant
                          ``content: null`` or a ``json_schema`` response format with a 500
                          "N validation errors: ..." (all seen live, issue 24)
    vLLM, SGLang          owned_by "vllm" / "sglang", honour ``n`` and both token limits
    Ollama                owned_by "library", ignores ``n`` and ``max_completion_tokens``
    TGI                   sends ``x-compute-type``; one choice whatever ``n``
    OpenAI                sends ``openai-version``; owned_by "system"

Every chat request body a fake receives is kept in ``Fake.received``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from aiohttp.test_utils import TestServer


@dataclass(frozen=True)
class Behaviour:
    owned_by: str
    model_name: str
    headers: dict[str, str] = field(default_factory=dict)
    native_n: bool = True
    reads_max_completion_tokens: bool = True
    fails_on_part_lists: bool = False  # and on null assistant content, json_schema


BEHAVIOURS: dict[str, Behaviour] = {
    "llama_cpp": Behaviour("me", "/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                           {"server": "uvicorn"}, native_n=False,
                           reads_max_completion_tokens=False, fails_on_part_lists=True),
    "vllm": Behaviour("vllm", "Qwen/Qwen2.5-7B-Instruct", {"server": "uvicorn"}),
    "sglang": Behaviour("sglang", "meta-llama/Llama-3.1-8B-Instruct", {"server": "uvicorn"}),
    "ollama": Behaviour("library", "llama3.2:latest", native_n=False,
                        reads_max_completion_tokens=False),
    "tgi": Behaviour("tgi-model", "tgi", {"x-compute-type": "gpu+optimized"}, native_n=False,
                     reads_max_completion_tokens=False),
    "openai": Behaviour("system", "gpt-4o-mini-2024-07-18", {"openai-version": "2020-10-01"}),
}  # fmt: skip

DEFAULT_TOKENS = 45  # what a server generates when it reads no limit


@dataclass
class Fake:
    url: str
    behaviour: Behaviour
    received: list[dict[str, Any]] = field(default_factory=list)
    model_lists: int = 0


def _llama_cpp_500(body: dict[str, Any]) -> str | None:
    if any(isinstance(m.get("content"), list) for m in body["messages"]):
        return 'can only concatenate str (not "list") to str'
    if any(m.get("content", "") is None for m in body["messages"]):
        return "7 validation errors:\n  {'type': 'literal_error', 'loc': ('body', 'messages')}"
    if (body.get("response_format") or {}).get("type") == "json_schema":
        return (
            "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format')}"
        )
    return None


def _answer(fake: Fake, body: dict[str, Any]) -> web.Response:
    b = fake.behaviour
    message = _llama_cpp_500(body) if b.fails_on_part_lists else None
    if message is not None:
        error = {"message": message, "type": "internal_server_error", "param": None,
                 "code": None}  # fmt: skip
        return web.json_response({"error": error}, status=500, headers=b.headers)
    limit = body.get("max_tokens")
    if b.reads_max_completion_tokens and body.get("max_completion_tokens") is not None:
        limit = body["max_completion_tokens"]
    tokens = min(limit or DEFAULT_TOKENS, DEFAULT_TOKENS)
    n = (body.get("n") or 1) if b.native_n else 1
    seed = body.get("seed")
    choices = [
        {"index": i, "message": {"role": "assistant", "content": f"answer {i} seed {seed}"},
         "finish_reason": "length" if tokens < DEFAULT_TOKENS else "stop"}
        for i in range(n)
    ]  # fmt: skip
    usage = {"prompt_tokens": 10, "completion_tokens": tokens * n, "total_tokens": 10 + tokens * n}
    answer = {"id": f"chatcmpl-{len(fake.received)}", "object": "chat.completion",
              "created": 1, "model": b.model_name, "choices": choices, "usage": usage}  # fmt: skip
    return web.json_response(answer, headers=b.headers)


@asynccontextmanager
async def fake_server(kind: str) -> AsyncIterator[Fake]:
    behaviour = BEHAVIOURS[kind]
    fake = Fake("", behaviour)

    async def models(_: web.Request) -> web.Response:
        fake.model_lists += 1
        data = [{"id": behaviour.model_name, "object": "model", "created": 1,
                 "owned_by": behaviour.owned_by}]  # fmt: skip
        return web.json_response({"object": "list", "data": data}, headers=behaviour.headers)

    async def chat(request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        fake.received.append(body)
        return _answer(fake, body)

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    async with TestServer(app, host="127.0.0.1") as server:
        fake.url = str(server.make_url("/v1"))
        yield fake
