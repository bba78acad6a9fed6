"""One embedding per request, computed at most once, awaited by whoever needs it first.

The semantic cache (after an exact miss) and the router (vector-similarity or classifier
routing) both want the vector of the request's question.  The pipeline attaches a
``LazyEmbedding`` to the request's record; ``request_embedding(record)`` returns it, and
``await lazy.vector()`` computes it on the first call (through the shared ``AsyncEmbedder``,
micro-batched with other requests) and returns the same array to every later caller.

One caller giving up does not cancel the vector for the others (the computation is shielded);
when the last one gives up (the client hung up), the computation is cancelled, so the embedder
drops the job instead of embedding a question nobody waits for; a caller that comes after
that (a stage that gave up on a deadline, then the router) starts it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hybrid_gateway.embedding.base import AsyncEmbedder, Vector
from hybrid_gateway.types import RequestRecord

_KEY = "embedding"
_STATIC_KEY = "static_embedding"  # the static embedder's vector of the same question
_ALIVE = "client_alive"


class LazyEmbedding:
    def __init__(
        self, embedder: AsyncEmbedder, text: str, alive: Callable[[], bool] | None = None
    ) -> None:
        self._embedder = embedder
        self.text = text
        self._alive = alive
        self._task: asyncio.Task[Vector] | None = None
        self._waiters = 0

    @property
    def namespace(self) -> str:
        return self._embedder.namespace

    @property
    def computed(self) -> bool:
        return self._task is not None and self._task.done() and not self._task.cancelled()

    async def vector(self) -> Vector:
        if self._task is None or (self._task.cancelled() and self._waiters == 0):
            # first caller, or a caller after everyone before gave up: (re)compute
            embed_for = getattr(self._embedder, "embed_for", None)
            job = (
                embed_for(self.text, self._alive)
                if self._alive is not None and embed_for is not None
                else self._embedder.embed_one(self.text)
            )
            self._task = asyncio.ensure_future(job)
        task = self._task
        self._waiters += 1
        try:
            # shield: one caller giving up does not cancel the others' vector
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if self._waiters == 1 and not task.done():
                task.cancel()  # the last waiter left: nobody needs this vector
            raise
        finally:
            self._waiters -= 1


def attach_embedding(record: RequestRecord, lazy: LazyEmbedding) -> None:
    record.extra[_KEY] = lazy


def attach_static(record: RequestRecord, lazy: LazyEmbedding) -> None:
    """The request's lazy *static* vector (``embedding/static.py``): the semantic cache's
    cascade indexes by it and the router's cascade scores with it; whoever comes first
    attaches it, the other reuses it."""
    record.extra[_STATIC_KEY] = lazy


def static_embedding(record: RequestRecord) -> LazyEmbedding | None:
    value = record.extra.get(_STATIC_KEY)
    return value if isinstance(value, LazyEmbedding) else None


def attach_client_check(record: RequestRecord, alive: Callable[[], bool]) -> None:
    """The API layer's "is the client still connected?" for this request: an embedding job
    of a client that has left is dropped instead of computed."""
    record.extra[_ALIVE] = alive


def client_check(record: RequestRecord) -> Callable[[], bool] | None:
    alive = record.extra.get(_ALIVE)
    return alive if callable(alive) else None


def request_embedding(record: RequestRecord) -> LazyEmbedding | None:
    """The request's lazily computed question embedding, or None (no embedder configured)."""
    value = record.extra.get(_KEY)
    return value if isinstance(value, LazyEmbedding) else None
