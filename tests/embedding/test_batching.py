"""Embedding off the loop: concurrent requests share one model call; failures reach every waiter."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from hybrid_gateway.embedding.base import Matrix
from hybrid_gateway.embedding.batching import BatchingEmbedder
from tests.embedding.fakes import HashingEmbedder, hashed_vector


async def test_one_text_one_vector_and_the_namespace() -> None:
    embedder = BatchingEmbedder(HashingEmbedder(version="7"))
    vector = await embedder.embed_one("hello")
    assert np.allclose(vector, hashed_vector("hello"))
    assert embedder.namespace == "hashing@7"
    await embedder.aclose()


async def test_texts_queued_while_the_model_is_busy_go_in_one_batch() -> None:
    gate = threading.Event()
    inner = HashingEmbedder(gate=gate)
    embedder = BatchingEmbedder(inner, max_batch_size=4)
    first = asyncio.ensure_future(embedder.embed_one("first"))
    await asyncio.to_thread(inner.entered.wait, 10)  # the worker is inside the first call
    rest = [asyncio.ensure_future(embedder.embed_one(f"text {i}")) for i in range(6)]
    await asyncio.sleep(0)
    gate.set()
    vectors = await asyncio.gather(first, *rest)
    assert inner.calls[0] == ["first"]
    assert inner.calls[1] == ["text 0", "text 1", "text 2", "text 3"]  # max_batch_size
    assert inner.calls[2] == ["text 4", "text 5"]
    for i, vector in enumerate(vectors[1:]):
        assert np.allclose(vector, hashed_vector(f"text {i}"))  # each waiter gets its own row
    assert embedder.batches == 3 and embedder.texts == 7
    await embedder.aclose()


class Broken(HashingEmbedder):
    def embed(self, texts: Sequence[str]) -> Matrix:
        if "boom" in texts:
            raise RuntimeError("model failed")
        return super().embed(texts)


async def test_a_failing_batch_fails_its_waiters_and_the_worker_carries_on() -> None:
    embedder = BatchingEmbedder(Broken())
    with pytest.raises(RuntimeError, match="model failed"):
        await embedder.embed_one("boom")
    assert np.allclose(await embedder.embed_one("fine"), hashed_vector("fine"))
    await embedder.aclose()


async def test_embed_many_and_close_without_use() -> None:
    embedder = BatchingEmbedder(HashingEmbedder())
    matrix = await embedder.embed_many(["a", "b"])
    assert matrix.shape == (2, 64)
    await embedder.aclose()  # no thread was started: nothing to stop
    await embedder.aclose()
