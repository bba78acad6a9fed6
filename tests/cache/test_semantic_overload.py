"""The semantic stage when the embedder or the store cannot keep up: a saturated embedder is
a bypass (no wait), write-behind stores after the answer and keeps order, a store that is down
or too far behind loses writes, never requests; a bounded-token embedder's hits need the rest
of the text to match."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import cast

import orjson

from hybrid_gateway.accounting.prices import Price
from hybrid_gateway.cache.exact import MemoryExactCache
from hybrid_gateway.cache.semantic.cache import CacheBounds, Namespace, SemanticCache
from hybrid_gateway.cache.semantic.decision import DecisionRule
from hybrid_gateway.cache.semantic.hygiene import NoiseStripper, compile_uncacheable
from hybrid_gateway.cache.semantic.stage import EMBEDDER_BUSY, SemanticStage
from hybrid_gateway.embedding.base import AsyncEmbedder, Matrix, Vector
from hybrid_gateway.embedding.batching import BatchingEmbedder
from hybrid_gateway.pipeline.gateway import Pipeline, PipelineParts, Router
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.resilience.dispatch import Dispatcher
from hybrid_gateway.stores.base import StoreUnavailable
from hybrid_gateway.types import CacheOutcome, Usage
from tests.cache.test_semantic_pipeline import (
    FixedRouter,
    ScriptedDispatcher,
    chat,
    completion,
    record,
)
from tests.embedding.fakes import AsyncHashingEmbedder, HashingEmbedder

BOUNDS = CacheBounds(3600, 100, 10_000_000)
RULE = DecisionRule(threshold=0.9, guards=())


def _cache() -> SemanticCache:
    return SemanticCache(bounds=BOUNDS, rule=RULE, clock=ManualClock())


def _pipeline(
    stage: SemanticStage, exact: MemoryExactCache | None = None
) -> tuple[Pipeline, ScriptedDispatcher]:
    dispatcher = ScriptedDispatcher()
    parts = PipelineParts(
        router=cast(Router, FixedRouter()), dispatcher=cast(Dispatcher, dispatcher),
        prices={"up": Price(1.0, 1.0)}, exact_cache=exact, clock=ManualClock(), semantic=stage,
        uncacheable=compile_uncacheable([]),
    )  # fmt: skip
    return Pipeline(parts), dispatcher


async def test_a_saturated_embedder_is_a_bypass_not_a_wait() -> None:
    gate = threading.Event()  # the model stalls
    inner = HashingEmbedder(gate=gate)
    embedder = BatchingEmbedder(inner, max_queue=1)
    stage = SemanticStage(_cache(), embedder, stripper=NoiseStripper(), shared_scopes={})
    exact = MemoryExactCache(ttl_s=3600, max_entries=100, max_bytes=1_000_000, clock=ManualClock())
    pipeline, upstream = _pipeline(stage, exact)
    for q in ("first question", "second question", "third question"):
        upstream.script[q] = completion(f"answer to {q}")
    first = asyncio.ensure_future(pipeline.complete(chat("first question"), record()))
    await asyncio.to_thread(inner.entered.wait, 10)  # in the model
    second = asyncio.ensure_future(pipeline.complete(chat("second question"), record()))
    await asyncio.sleep(0.01)  # queued: the queue is full now
    third = record()
    result = await pipeline.complete(chat("third question"), third)  # does not wait
    assert orjson.loads(result.body)["choices"][0]["message"]["content"] == (
        "answer to third question")  # fmt: skip
    assert third.cache is CacheOutcome.BYPASS and third.extra["cache_checks"] == EMBEDDER_BUSY
    gate.set()
    await asyncio.gather(first, second)
    assert (await stage.cache.stats())["entries"] == 2  # no e5 vector: not stored here
    again = record()  # but the exact cache kept it: asked again, it is not embedded at all
    result = await pipeline.complete(chat("third question"), again)
    assert again.cache is CacheOutcome.EXACT
    assert orjson.loads(result.body)["choices"][0]["message"]["content"] == (
        "answer to third question")  # fmt: skip
    await stage.aclose()
    await embedder.aclose()


class SlowPutCache(SemanticCache):
    """Puts wait for ``release`` (a store that is slow to write)."""

    def __init__(self) -> None:
        super().__init__(bounds=BOUNDS, rule=RULE, clock=ManualClock())
        self.release = asyncio.Event()
        self.down = False

    async def put(self, namespace: Namespace, bucket: str, question: str, vector: Vector,
                  body: bytes, usage: Usage) -> int | None:  # fmt: skip
        await self.release.wait()
        if self.down:
            raise StoreUnavailable("store down")
        return await super().put(namespace, bucket, question, vector, body, usage)


async def test_write_behind_answers_before_the_write_and_a_later_lookup_sees_it() -> None:
    cache = SlowPutCache()
    stage = SemanticStage(cache, AsyncHashingEmbedder(), stripper=NoiseStripper(),
                          shared_scopes={}, write_behind=True)  # fmt: skip
    pipeline, upstream = _pipeline(stage)
    upstream.script["How do I reset my password?"] = completion("Use the reset link.")
    await pipeline.complete(chat("How do I reset my password?"), record())  # returns unwritten
    assert cache.entries == 0 and len(stage._writes) == 1
    cache.release.set()
    await stage.flush()
    second = record()
    await pipeline.complete(chat("how do I reset my password"), second)
    assert second.cache is CacheOutcome.SEMANTIC and upstream.calls == 1
    await stage.aclose()


async def test_write_behind_with_the_store_down_or_too_far_behind_loses_writes_only() -> None:
    cache = SlowPutCache()
    stage = SemanticStage(cache, AsyncHashingEmbedder(), stripper=NoiseStripper(),
                          shared_scopes={}, write_behind=True,
                          write_behind_max_pending=2)  # fmt: skip
    pipeline, upstream = _pipeline(stage)
    for i in range(3):
        upstream.script[f"question number {i} about pears"] = completion(f"answer {i}")
        await pipeline.complete(chat(f"question number {i} about pears"), record())
    assert stage.writes_dropped == 1  # two pending at most
    cache.down = True
    cache.release.set()
    await stage.aclose()  # flushes: the failed writes end quietly
    assert cache.entries == 0 and not stage._writes


class Truncating(HashingEmbedder):
    """Reads only the first ``n`` words (as ``embedding.max_tokens`` does with tokens)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self._n = n

    def embedded_text(self, text: str) -> str:
        words = text.split(" ")
        return text if len(words) <= self._n else " ".join(words[: self._n]) + " "

    def embed(self, texts: Sequence[str]) -> Matrix:
        return super().embed([self.embedded_text(t) for t in texts])


async def test_with_bounded_tokens_a_hit_needs_the_rest_of_the_text_to_match() -> None:
    embedder: AsyncEmbedder = BatchingEmbedder(Truncating(6))
    stage = SemanticStage(_cache(), embedder, stripper=NoiseStripper(), shared_scopes={})
    pipeline, upstream = _pipeline(stage)
    head = "please summarise the following report carefully"
    for tail in ("the harvest was good", "the harvest failed"):
        upstream.script[f"{head} {tail}"] = completion(tail)
    await pipeline.complete(chat(f"{head} the harvest was good"), record())
    other = record()
    await pipeline.complete(chat(f"{head} the harvest failed"), other)  # same vector, other text
    assert other.cache is CacheOutcome.MISS and "!truncated_tail" in other.extra["cache_checks"]
    again = record()
    await pipeline.complete(chat(f"P{head[1:]} the harvest was good"), again)  # same past the cut
    assert again.cache is CacheOutcome.SEMANTIC and upstream.calls == 2
    await stage.aclose()
    await cast(BatchingEmbedder, embedder).aclose()
