"""The HTTP reranker hook against a rerank service on loopback (TEI and Cohere shapes)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from hybrid_gateway.cache.semantic.rerank import HttpReranker


@pytest.fixture
async def rerank_url() -> AsyncIterator[str]:
    async def tei(request: web.Request) -> web.Response:
        body = await request.json()
        same = body["query"].lower().rstrip("?") == body["texts"][0].lower().rstrip("?")
        return web.json_response([{"index": 0, "score": 0.97 if same else 0.02}])

    async def cohere(request: web.Request) -> web.Response:
        return web.json_response({"results": [{"index": 0, "relevance_score": 0.8}]})

    async def broken(request: web.Request) -> web.Response:
        return web.json_response({"oops": True})

    app = web.Application()
    app.router.add_post("/rerank", tei)
    app.router.add_post("/v1/rerank", cohere)
    app.router.add_post("/broken", broken)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def test_scores_from_both_response_shapes(rerank_url: str) -> None:
    tei = HttpReranker(f"{rerank_url}/rerank")
    assert await tei.score("How do I pay?", "how do I pay") == pytest.approx(0.97)
    assert await tei.score("How do I pay?", "How do I get paid?") == pytest.approx(0.02)
    await tei.aclose()
    cohere = HttpReranker(f"{rerank_url}/v1/rerank", model="rerank-v3")
    assert await cohere.score("a", "b") == pytest.approx(0.8)
    await cohere.aclose()


async def test_a_response_without_scores_is_an_error(rerank_url: str) -> None:
    broken = HttpReranker(f"{rerank_url}/broken")
    with pytest.raises(ValueError, match="rerank"):
        await broken.score("a", "b")
    await broken.aclose()
