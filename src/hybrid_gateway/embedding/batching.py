"""Embedding off the event loop: concurrent requests share model calls, under bounds.

``BatchingEmbedder`` owns one worker thread and a queue of jobs (a text and the future its
request awaits).  The worker takes the first waiting job, then more, oldest first, while the
batch stays within ``max_batch_size`` texts *and* ``max_batch_tokens`` tokens (the first job
always goes, however long): a batch of long texts is one long call that every request in it
waits for, so the bound that matters is tokens, not texts.  It may wait up to ``max_wait_ms``
for company (0: never wait; texts that arrived while the model was busy still go together).

Overload is handled like any overload:

* **bounded queue**: at most ``max_queue`` texts wait; one more raises ``EmbedderSaturated``
  at once (the semantic stage then lets the request skip the cache: a plain miss, reason
  ``embedder_busy``), instead of queueing work nobody will wait for;
* **cancellation**: a job whose request went away leaves the queue at once and is never
  embedded: when its awaiting task is cancelled, or (``embed_for``) when the client's
  connection is found closed as the worker forms a batch;
* **reuse**: the vectors of the last ``cache_size`` texts are kept (exact text match), so a
  repeated question is not embedded again;
* **prediction**: ``expected_ms(texts)`` says how long new texts would wait for their vectors
  (the tokens queued and in the running batch, plus theirs, at the model's measured
  milliseconds per token): a caller with a deadline (the cache's cascade) does not start work
  that cannot finish in time.

Tokens are estimated from the text's size (``estimate_tokens``), not counted: counting means
tokenizing, which costs the bundled engine milliseconds per text.

The thread starts lazily on the first call and stops in ``aclose``: nothing runs at
construction, nothing at import.  The batch wait reads an injected clock.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from hybrid_gateway.embedding.base import Embedder, Matrix, Vector, namespace_of
from hybrid_gateway.resilience.clock import Clock, MonotonicClock

__all__ = ["BatchingEmbedder", "ClientLeft", "EmbedderSaturated"]


class EmbedderSaturated(RuntimeError):
    """The embedding queue is full: the request should not wait for a vector."""


class ClientLeft(EmbedderSaturated):
    """The job was dropped unembedded: its client hung up before its batch formed."""


@dataclass(slots=True)
class _Job:
    text: str
    future: asyncio.Future[Vector]
    loop: asyncio.AbstractEventLoop
    tokens: int = -1  # estimated by the worker, off the event loop
    cancelled: bool = field(default=False)
    alive: Callable[[], bool] | None = None  # False once the client has hung up

    def wanted(self) -> bool:
        return not self.cancelled and (self.alive is None or self.alive())


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` for the batch budget, without tokenizing (the bundled engine's
    tokenizer costs ~2 ms for a 300-character prompt, ~8 ms for 2,000): UTF-8 bytes / 3, which
    is about one per CJK character and ~1.3x the count of English text."""
    return len(text.encode("utf-8", "surrogatepass")) // 3 + 2


class BatchingEmbedder:
    """An ``AsyncEmbedder`` over a blocking ``Embedder``."""

    def __init__(
        self,
        embedder: Embedder,
        *,
        max_batch_size: int = 16,
        max_wait_ms: float = 0.0,
        max_batch_tokens: int = 512,
        max_queue: int | None = 256,
        cache_size: int = 1024,
        clock: Clock | None = None,
    ) -> None:
        self._embedder = embedder
        self._max_batch = max_batch_size
        self._max_wait_s = max_wait_ms / 1000
        self._max_tokens = max_batch_tokens
        self._max_queue = max_queue
        self._clock = clock or MonotonicClock()
        self._jobs: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._recent: OrderedDict[str, Vector] = OrderedDict()  # touched on the loop only
        self._cache_size = cache_size
        self.batches = 0  # calls made to the model, for tests and the bench
        self.texts = 0
        self.tokens = 0
        self.reused = 0  # texts answered from the recent vectors
        self.rejected = 0  # texts refused because the queue was full
        self.dropped = 0  # jobs whose request left before they were embedded
        self._ms_per_token: float | None = None  # measured, moving average; None: no batch yet
        self._busy_tokens = 0  # of the batch the model is embedding now

    @property
    def namespace(self) -> str:
        return namespace_of(self._embedder)

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    @property
    def queued(self) -> int:
        return len(self._jobs)

    def embedded_text(self, text: str) -> str:
        """What the model reads of ``text`` (its prefix, when the model bounds its tokens)."""
        cut = getattr(self._embedder, "embedded_text", None)
        return str(cut(text)) if callable(cut) else text

    async def embed_one(self, text: str) -> Vector:
        return await self.embed_for(text, None)

    async def embed_for(self, text: str, alive: Callable[[], bool] | None) -> Vector:
        """``embed_one`` for a client that may leave: ``alive()`` turning False (read by the
        worker before each batch) drops the job unembedded; its waiter gets
        ``EmbedderSaturated``."""
        recent = self._recent.get(text)
        if recent is not None:
            self._recent.move_to_end(text)
            self.reused += 1
            return recent
        loop = asyncio.get_running_loop()
        job = _Job(text, loop.create_future(), loop, alive=alive)
        with self._cond:
            if self._max_queue is not None and len(self._jobs) >= self._max_queue:
                self._purge()  # jobs of clients that left make room first
            if self._max_queue is not None and len(self._jobs) >= self._max_queue:
                self.rejected += 1
                raise EmbedderSaturated(f"{len(self._jobs)} texts already wait for the embedder")
            self._ensure_thread()
            self._jobs.append(job)
            self._cond.notify()
        try:
            vector = await job.future
        except asyncio.CancelledError:
            self._withdraw(job)
            raise
        self._remember(text, vector)
        return vector

    async def embed_many(self, texts: Sequence[str]) -> Matrix:
        """A whole list in one call, off the loop (offline tools, warm-up)."""
        return await asyncio.to_thread(self._embedder.embed, list(texts))

    async def aclose(self) -> None:
        with self._cond:
            thread, self._thread = self._thread, None
            self._stopping = True
            self._cond.notify_all()
        if thread is not None:
            await asyncio.to_thread(thread.join)
        for job in self._drain():
            job.loop.call_soon_threadsafe(_fail, job.future, EmbedderSaturated("closed"))
        close = getattr(self._embedder, "close", None)  # a model with files (static's tokens)
        if callable(close):
            close()

    # -- the loop side -------------------------------------------------------------------
    def _remember(self, text: str, vector: Vector) -> None:
        if self._cache_size <= 0:
            return
        vector.flags.writeable = False  # shared by every later request with this text
        self._recent[text] = vector
        if len(self._recent) > self._cache_size:
            self._recent.popitem(last=False)

    def _withdraw(self, job: _Job) -> None:
        """The request left: take its job out of the queue (or let the worker drop it)."""
        job.cancelled = True
        with self._cond:
            try:
                self._jobs.remove(job)
            except ValueError:
                return  # already taken into a batch
            self.dropped += 1

    def expected_ms(self, texts: Sequence[str]) -> float | None:
        """How long vectors of ``texts`` would take from now: the estimated tokens queued, in
        the running batch and of the texts not among the recent ones, at the measured rate;
        0 when every text is recent, None before a batch has been timed (the first one, which
        loads the model, is not)."""
        new = sum(estimate_tokens(t) for t in texts if t not in self._recent)
        rate = self._ms_per_token
        if new == 0 or rate is None:
            return 0.0 if new == 0 else None
        with self._cond:
            waiting = sum(estimate_tokens(job.text) for job in self._jobs)
            busy = self._busy_tokens
        return (busy + waiting + new) * rate

    # -- the worker side -----------------------------------------------------------------
    def _ensure_thread(self) -> None:  # under self._cond
        if self._thread is None and not self._stopping:
            self._thread = threading.Thread(target=self._work, name="embedder", daemon=True)
            self._thread.start()

    def _drain(self) -> list[_Job]:
        with self._cond:
            jobs = list(self._jobs)
            self._jobs.clear()
        return jobs

    def _tokens(self, job: _Job) -> int:
        if job.tokens < 0:
            bound = getattr(self._embedder, "max_tokens", None)
            job.tokens = estimate_tokens(job.text)
            if isinstance(bound, int):
                job.tokens = min(job.tokens, bound)
        return job.tokens

    def _take_batch(self) -> list[_Job] | None:
        """The next batch, or None when stopping.  Called without the lock held."""
        with self._cond:
            while not self._jobs and not self._stopping:
                self._cond.wait()
            if self._stopping:
                return None
            self._purge()
            if not self._jobs:
                return []
            batch = [self._jobs.popleft()]
        budget = self._max_tokens - self._tokens(batch[0])
        deadline = self._clock.now() + self._max_wait_s
        while len(batch) < self._max_batch and budget > 0:
            with self._cond:
                if not self._jobs:
                    remaining = deadline - self._clock.now()
                    if remaining <= 0 or self._stopping:
                        break
                    self._cond.wait(remaining)
                    continue
                candidate = self._jobs[0]
            cost = self._tokens(candidate)  # outside the lock: counting costs CPU
            with self._cond:
                if not self._jobs or self._jobs[0] is not candidate:
                    continue  # withdrawn meanwhile
                if cost > budget:
                    break
                batch.append(self._jobs.popleft())
            budget -= cost
        return batch

    def _measured(self, elapsed_ms: float, tokens: int) -> None:
        # the first call loads the model (seconds for the bundled one): not a rate
        if tokens > 0 and self.batches > 1:
            self._ms_per_token = _moving(self._ms_per_token, elapsed_ms / tokens)

    def _purge(self) -> None:  # under self._cond
        """Every queued job whose client has left goes now, not when its turn comes: under
        a burst their slots are what new requests need."""
        gone = [job for job in self._jobs if not job.wanted()]
        for job in gone:
            self._jobs.remove(job)
            self._drop(job)

    def _drop(self, job: _Job) -> None:
        self.dropped += 1
        job.loop.call_soon_threadsafe(_fail, job.future, ClientLeft("client left"))

    def _work(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            gone = [job for job in batch if not job.wanted()]
            for job in gone:  # a waiter left without its task being cancelled
                self._drop(job)
            batch = [job for job in batch if job not in gone]
            if not batch:
                continue
            self.batches += 1
            self.texts += len(batch)
            tokens = sum(job.tokens for job in batch if job.tokens > 0)
            self.tokens += tokens
            self._busy_tokens = tokens
            started = self._clock.now()
            try:
                vectors = self._embedder.embed([job.text for job in batch])
            except Exception as exc:  # every waiter gets the failure, the worker carries on
                for job in batch:
                    job.loop.call_soon_threadsafe(_fail, job.future, exc)
                continue
            finally:
                self._busy_tokens = 0
            self._measured((self._clock.now() - started) * 1000, tokens)
            for job, vector in zip(batch, vectors, strict=True):
                job.loop.call_soon_threadsafe(_resolve, job.future, np.array(vector))


def _moving(old: float | None, value: float) -> float:
    return value if old is None else 0.8 * old + 0.2 * value


def _resolve(future: asyncio.Future[Vector], vector: Vector) -> None:
    if not future.done():
        future.set_result(vector)


def _fail(future: asyncio.Future[Vector], exc: Exception) -> None:
    if not future.done():
        future.set_exception(exc)
