"""One embedding per request, computed at most once, awaited by whoever needs it first.

The semantic cache (after an exact miss) and the router (vector-similarity or classifier
routing) both want the vector of the request's question.  The pipeline attaches a
``LazyEmbedding`` to the request's record; ``request_embedding(record)`` returns it, and
``await lazy.vector()`` computes it on the first call (through the shared ``AsyncEmbedder``,
micro-batched with other requests) and returns the same array to every later caller.
"""

from __future__ import annotations

import asyncio

from hybrid_gateway.embedding.base import AsyncEmbedder, Vector
from hybrid_gateway.types import RequestRecord

_KEY = "embedding"


class LazyEmbedding:
    def __init__(self, embedder: AsyncEmbedder, text: str) -> None:
        self._embedder = embedder
        self.text = text
        self._task: asyncio.Task[Vector] | None = None

    @property
    def namespace(self) -> str:
        return self._embedder.namespace

    @property
    def computed(self) -> bool:
        return self._task is not None and self._task.done() and not self._task.cancelled()

    async def vector(self) -> Vector:
        if self._task is None:
            self._task = asyncio.ensure_future(self._embedder.embed_one(self.text))
        # shield: one caller giving up (a client disconnect) does not cancel the others' vector
        return await asyncio.shield(self._task)


def attach_embedding(record: RequestRecord, lazy: LazyEmbedding) -> None:
    record.extra[_KEY] = lazy


def request_embedding(record: RequestRecord) -> LazyEmbedding | None:
    """The request's lazily computed question embedding, or None (no embedder configured)."""
    value = record.extra.get(_KEY)
    return value if isinstance(value, LazyEmbedding) else None
