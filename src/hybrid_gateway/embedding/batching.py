"""Embedding off the event loop, with concurrent requests sharing one model call.

``BatchingEmbedder`` owns one worker thread.  ``embed_one`` queues the text with a future and
awaits it; the worker takes the first waiting text, then everything else already queued (up to
``max_batch_size``), optionally waits up to ``max_wait_ms`` for more, embeds the batch in one
call and resolves the futures on their loop.  Under load, texts that arrived while the model was
busy go together in the next call without any added wait; ``max_wait_ms`` trades a little
latency for larger batches, and is only worth it where a batch is cheaper per text than single
calls (``hybrid-gateway bench semantic`` measures exactly that).

The thread is started lazily on the first call and stopped by ``aclose``: nothing runs at
construction, nothing at import.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from hybrid_gateway.embedding.base import Embedder, Matrix, Vector, namespace_of

_STOP = object()


@dataclass(frozen=True, slots=True)
class _Job:
    text: str
    future: asyncio.Future[Vector]
    loop: asyncio.AbstractEventLoop


class BatchingEmbedder:
    """An ``AsyncEmbedder`` over a blocking ``Embedder``."""

    def __init__(self, embedder: Embedder, *, max_batch_size: int = 16, max_wait_ms: float = 0.0):
        self._embedder = embedder
        self._max_batch = max_batch_size
        self._max_wait_s = max_wait_ms / 1000
        self._jobs: queue.SimpleQueue[_Job | object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.batches = 0  # calls made to the model, for tests and the bench
        self.texts = 0

    @property
    def namespace(self) -> str:
        return namespace_of(self._embedder)

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    async def embed_one(self, text: str) -> Vector:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Vector] = loop.create_future()
        self._ensure_thread()
        self._jobs.put(_Job(text, future, loop))
        return await future

    async def embed_many(self, texts: Sequence[str]) -> Matrix:
        """A whole list in one call, off the loop (offline tools, warm-up)."""
        return await asyncio.to_thread(self._embedder.embed, list(texts))

    async def aclose(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(_STOP)
            await asyncio.to_thread(thread.join)

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="embedder", daemon=True)
                self._thread.start()

    def _take_batch(self, first: _Job) -> list[_Job]:
        batch = [first]
        deadline = time.monotonic() + self._max_wait_s
        while len(batch) < self._max_batch:
            try:
                item = self._jobs.get_nowait()
            except queue.Empty:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    item = self._jobs.get(timeout=remaining)
                except queue.Empty:
                    break
            if item is _STOP:
                self._jobs.put(_STOP)  # finish this batch, then stop
                break
            assert isinstance(item, _Job)
            batch.append(item)
        return batch

    def _work(self) -> None:
        while True:
            item = self._jobs.get()
            if item is _STOP:
                return
            assert isinstance(item, _Job)
            batch = self._take_batch(item)
            self.batches += 1
            self.texts += len(batch)
            try:
                vectors = self._embedder.embed([job.text for job in batch])
            except Exception as exc:  # every waiter gets the failure, the worker carries on
                for job in batch:
                    job.loop.call_soon_threadsafe(_fail, job.future, exc)
                continue
            for job, vector in zip(batch, vectors, strict=True):
                job.loop.call_soon_threadsafe(_resolve, job.future, vector)


def _resolve(future: asyncio.Future[Vector], vector: Vector) -> None:
    if not future.done():
        future.set_result(vector)


def _fail(future: asyncio.Future[Vector], exc: Exception) -> None:
    if not future.done():
        future.set_exception(exc)
