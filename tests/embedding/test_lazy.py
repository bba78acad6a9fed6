"""One embedding per request, computed at most once, shared by the cache and the router."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from hybrid_gateway.embedding.base import Vector
from hybrid_gateway.embedding.lazy import LazyEmbedding, attach_embedding, request_embedding
from hybrid_gateway.types import RequestRecord
from tests.embedding.fakes import AsyncHashingEmbedder


async def test_computed_once_for_every_caller() -> None:
    embedder = AsyncHashingEmbedder()
    record = RequestRecord(request_id="r", started_at=0.0)
    assert request_embedding(record) is None
    lazy = LazyEmbedding(embedder, "how do I pay?")
    attach_embedding(record, lazy)
    assert request_embedding(record) is lazy and not lazy.computed
    vectors = await asyncio.gather(*(lazy.vector() for _ in range(5)))
    again = await lazy.vector()
    assert embedder.calls == 1 and lazy.computed
    assert all(np.array_equal(v, again) for v in vectors)
    assert lazy.namespace == "hashing@1"


async def test_one_caller_cancelled_does_not_cancel_the_vector() -> None:
    embedder = AsyncHashingEmbedder()
    lazy = LazyEmbedding(embedder, "q")
    waiter = asyncio.ensure_future(lazy.vector())
    await asyncio.sleep(0)
    waiter.cancel()
    assert (await lazy.vector()).shape == (64,)
    assert embedder.calls == 1


class _Gated(AsyncHashingEmbedder):
    """Answers once ``open`` is set (an e5 slower than a stage's deadline)."""

    def __init__(self) -> None:
        super().__init__()
        self.open = asyncio.Event()

    async def embed_one(self, text: str) -> Vector:
        await self.open.wait()
        return await super().embed_one(text)


async def test_a_stage_that_gave_up_alone_does_not_poison_the_next_caller() -> None:
    # The cache cascade's e5 deadline left the vector while nobody else waited for it: the
    # computation was cancelled, and the router's later `await vector()` raised
    # CancelledError, which the handler took for a client that hung up (a 499 and a
    # dropped connection in the bench).  A later caller now computes it again.
    embedder = _Gated()
    lazy = LazyEmbedding(embedder, "q")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(lazy.vector(), 0.01)
    embedder.open.set()
    assert (await lazy.vector()).shape == (64,)
