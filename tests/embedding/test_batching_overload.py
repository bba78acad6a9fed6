"""The embedder under overload: token-budget batches, a bounded queue, cancelled jobs dropped,
repeated texts reused; each with its failure case (a stalled or dying model)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from hybrid_gateway.embedding.base import Matrix, Vector
from hybrid_gateway.embedding.batching import (
    BatchingEmbedder,
    ClientLeft,
    EmbedderSaturated,
    estimate_tokens,
)
from hybrid_gateway.embedding.lazy import LazyEmbedding
from hybrid_gateway.resilience.clock import ManualClock
from tests.embedding.fakes import HashingEmbedder, hashed_vector


async def _busy(inner: HashingEmbedder, embedder: BatchingEmbedder) -> asyncio.Future[Vector]:
    """Start one job and return once the worker is inside the (gated) model call."""
    first = asyncio.ensure_future(embedder.embed_one("first"))
    await asyncio.to_thread(inner.entered.wait, 10)
    return first


async def test_batches_are_bounded_by_tokens_not_only_by_texts() -> None:
    gate = threading.Event()
    inner = HashingEmbedder(gate=gate)
    embedder = BatchingEmbedder(inner, max_batch_size=16, max_batch_tokens=20)
    first = await _busy(inner, embedder)
    texts = ["a" * 30, "b" * 18, "c" * 9, "d" * 60, "e" * 3]  # ~ 12, 8, 5, 22, 3 tokens
    assert [estimate_tokens(t) for t in texts] == [12, 8, 5, 22, 3]
    assert estimate_tokens("\u4f60\u597d\u5417") == 3 + 2  # about one per CJK character
    rest = [asyncio.ensure_future(embedder.embed_one(t)) for t in texts]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(first, *rest)
    # 12 + 8 fill the budget; 5 fits, 22 would not: it goes first in the next call, alone,
    # though over the budget; then the rest
    assert inner.calls[1:] == [texts[:2], texts[2:3], texts[3:4], texts[4:]]
    assert embedder.tokens == 3 + 12 + 8 + 5 + 22 + 3  # "first" counts 3
    await embedder.aclose()


async def test_a_full_queue_refuses_at_once_while_the_model_stalls() -> None:
    gate = threading.Event()  # the model stalls until the gate opens
    inner = HashingEmbedder(gate=gate)
    embedder = BatchingEmbedder(inner, max_queue=2)
    first = await _busy(inner, embedder)
    queued = [asyncio.ensure_future(embedder.embed_one(f"q{i}")) for i in range(2)]
    await asyncio.sleep(0)
    assert embedder.queued == 2
    with pytest.raises(EmbedderSaturated):
        await embedder.embed_one("one too many")
    assert embedder.rejected == 1
    gate.set()
    await asyncio.gather(first, *queued)
    assert np.allclose(await embedder.embed_one("later"), hashed_vector("later"))  # room again
    await embedder.aclose()


async def test_a_job_whose_request_left_is_never_embedded() -> None:
    gate = threading.Event()
    inner = HashingEmbedder(gate=gate)
    embedder = BatchingEmbedder(inner, max_queue=1)
    first = await _busy(inner, embedder)
    lazy = LazyEmbedding(embedder, "the client hangs up")
    waiter = asyncio.ensure_future(lazy.vector())
    await asyncio.sleep(0.01)
    assert embedder.queued == 1
    waiter.cancel()  # the request's task is cancelled: its only waiter left
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await asyncio.sleep(0)
    assert embedder.queued == 0 and embedder.dropped == 1  # its slot is free at once
    gate.set()
    await first
    await embedder.embed_one("next")
    assert all("the client hangs up" not in call for call in inner.calls)
    await embedder.aclose()


async def test_one_waiter_leaving_keeps_the_job_for_the_other() -> None:
    gate = threading.Event()
    inner = HashingEmbedder(gate=gate)
    embedder = BatchingEmbedder(inner)
    first = await _busy(inner, embedder)
    lazy = LazyEmbedding(embedder, "shared")
    leaving, staying = asyncio.ensure_future(lazy.vector()), asyncio.ensure_future(lazy.vector())
    await asyncio.sleep(0.01)
    leaving.cancel()
    gate.set()
    await first
    assert np.allclose(await staying, hashed_vector("shared"))
    await embedder.aclose()


async def test_a_repeated_text_is_not_embedded_again_and_the_oldest_goes_first() -> None:
    inner = HashingEmbedder()
    embedder = BatchingEmbedder(inner, cache_size=2)
    one = await embedder.embed_one("one")
    assert await embedder.embed_one("one") is one and embedder.reused == 1
    with pytest.raises(ValueError):
        one[0] = 0.0  # shared by later requests: read-only
    await embedder.embed_one("two")
    await embedder.embed_one("three")  # "one" is the least recently used: out
    await embedder.embed_one("one")
    assert [c for call in inner.calls for c in call] == ["one", "two", "three", "one"]
    await embedder.aclose()


class Dying(HashingEmbedder):
    def embed(self, texts: Sequence[str]) -> Matrix:
        raise RuntimeError("engine crashed")


async def test_a_dying_model_fails_every_waiter_and_caches_nothing() -> None:
    embedder = BatchingEmbedder(Dying())
    results = await asyncio.gather(*(embedder.embed_one(f"t{i}") for i in range(3)),
                                   return_exceptions=True)  # fmt: skip
    assert all(isinstance(r, RuntimeError) for r in results)
    with pytest.raises(RuntimeError):
        await embedder.embed_one("t0")  # a failure is never remembered as a vector
    assert embedder.reused == 0
    await embedder.aclose()


async def test_waiting_for_company_reads_the_injected_clock() -> None:
    clock = ManualClock()  # never advances: the worker waits for company until the batch fills
    inner = HashingEmbedder()
    embedder = BatchingEmbedder(inner, max_batch_size=3, max_wait_ms=60_000, clock=clock)
    tasks = []
    for text in ("a", "b", "c"):
        tasks.append(asyncio.ensure_future(embedder.embed_one(text)))
        await asyncio.sleep(0.01)  # one by one: each arrives while the worker waits
    await asyncio.gather(*tasks)
    assert inner.calls == [["a", "b", "c"]]
    await embedder.aclose()


async def test_close_fails_the_jobs_still_queued() -> None:
    gate = threading.Event()
    inner = HashingEmbedder(gate=gate)
    embedder = BatchingEmbedder(inner)
    first = await _busy(inner, embedder)
    queued = asyncio.ensure_future(embedder.embed_one("never"))
    await asyncio.sleep(0)
    closing = asyncio.ensure_future(embedder.aclose())
    await asyncio.sleep(0.01)
    gate.set()
    await closing
    await first
    with pytest.raises(EmbedderSaturated):
        await queued


async def test_a_job_of_a_client_that_hung_up_is_dropped_when_its_batch_forms() -> None:
    gate = threading.Event()
    inner = HashingEmbedder(gate=gate)
    embedder = BatchingEmbedder(inner)
    first = await _busy(inner, embedder)
    connected = {"left": True, "stays": True}
    left = asyncio.ensure_future(embedder.embed_for("left", lambda: connected["left"]))
    stays = asyncio.ensure_future(embedder.embed_for("stays", lambda: connected["stays"]))
    await asyncio.sleep(0.01)
    connected["left"] = False  # the connection closed; the handler's task was not cancelled
    gate.set()
    await first
    with pytest.raises(ClientLeft):
        await left
    assert np.allclose(await stays, hashed_vector("stays"))
    assert inner.calls[1] == ["stays"] and embedder.dropped == 1
    await embedder.aclose()


async def test_a_full_queue_first_makes_room_by_dropping_clients_that_left() -> None:
    gate = threading.Event()
    inner = HashingEmbedder(gate=gate)
    embedder = BatchingEmbedder(inner, max_queue=2)
    first = await _busy(inner, embedder)
    connected = [True, True]

    def alive(i: int) -> Callable[[], bool]:
        return lambda: connected[i]

    queued = [asyncio.ensure_future(embedder.embed_for(f"q{i}", alive(i))) for i in range(2)]
    await asyncio.sleep(0.01)
    connected[0] = False  # its client hung up while the model was busy
    newcomer = asyncio.ensure_future(embedder.embed_one("newcomer"))  # not refused
    await asyncio.sleep(0.01)
    assert embedder.rejected == 0 and embedder.dropped == 1
    with pytest.raises(ClientLeft):
        await queued[0]
    gate.set()
    await asyncio.gather(first, queued[1], newcomer)
    assert inner.calls[1] == ["q1", "newcomer"]
    await embedder.aclose()


class _Timed(HashingEmbedder):
    """Each call takes 2 ms of the injected clock per estimated token."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__()
        self.clock = clock
        self.load_s = 0.0  # added to the next call only

    def embed(self, texts: Sequence[str]) -> Matrix:
        self.clock._now += self.load_s + 0.002 * sum(estimate_tokens(t) for t in texts)
        self.load_s = 0.0
        return super().embed(texts)


async def test_the_expected_wait_is_queued_and_own_tokens_at_the_measured_rate() -> None:
    clock = ManualClock()
    inner = _Timed(clock)
    embedder = BatchingEmbedder(inner, clock=clock)
    assert embedder.expected_ms(["x" * 30]) is None  # nothing timed yet
    inner.load_s = 5.0  # the first call loads the model: not a rate
    await embedder.embed_one("z" * 30)
    assert embedder.expected_ms(["x" * 30]) is None
    await embedder.embed_one("a" * 30)  # 12 tokens in 24 ms: 2 ms a token
    assert embedder.expected_ms(["a" * 30]) == 0.0  # a recent text costs nothing
    assert embedder.expected_ms(["b" * 30, "c" * 9]) == pytest.approx((12 + 5) * 2.0)
    await embedder.aclose()


async def test_the_expected_wait_counts_the_queue_and_the_running_batch() -> None:
    gate = threading.Event()
    clock = ManualClock()
    inner = _Timed(clock)
    inner._gate = gate
    embedder = BatchingEmbedder(inner, clock=clock)
    gate.set()
    await embedder.embed_one("z" * 30)  # the first call: not timed
    await embedder.embed_one("a" * 30)  # the rate: 2 ms a token
    gate.clear()
    inner.entered.clear()
    running = asyncio.ensure_future(embedder.embed_one("b" * 60))  # 22 tokens, in the model
    await asyncio.to_thread(inner.entered.wait, 10)
    queued = asyncio.ensure_future(embedder.embed_one("c" * 30))  # 12 tokens, waiting
    await asyncio.sleep(0)
    assert embedder.expected_ms(["d" * 9]) == pytest.approx((22 + 12 + 5) * 2.0)
    gate.set()
    await asyncio.gather(running, queued)
    await embedder.aclose()
