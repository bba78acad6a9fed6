"""The semantic stage inside the pipeline: what is served, what is never stored."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any, cast

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid_gateway.accounting.prices import Price
from hybrid_gateway.cache.semantic.cache import CacheBounds, SemanticCache
from hybrid_gateway.cache.semantic.decision import DecisionRule
from hybrid_gateway.cache.semantic.hygiene import NoiseStripper, compile_uncacheable
from hybrid_gateway.cache.semantic.settings import RerankerConfig
from hybrid_gateway.cache.semantic.stage import RerankStep, SemanticStage, scope_of
from hybrid_gateway.embedding.lazy import request_embedding
from hybrid_gateway.errors import UpstreamUnavailable
from hybrid_gateway.pipeline.gateway import Pipeline, PipelineParts, Router
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.resilience.dispatch import Dispatcher
from hybrid_gateway.types import CacheOutcome, ChatRequest, RequestRecord, RouteDecision
from tests.embedding.fakes import AsyncHashingEmbedder

ROUTE = RouteDecision("light", "up", "default")


class FixedRouter:
    async def route(
        self, request: ChatRequest, record: RequestRecord, *, embed: bool = True
    ) -> RouteDecision:
        return ROUTE


@dataclass
class Channel:
    name: str = "up"


def completion(content: str, finish: str = "stop", tool: bool = False) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool:
        message["tool_calls"] = [{"id": "c", "type": "function",
                                  "function": {"name": "f", "arguments": "{}"}}]  # fmt: skip
    return {"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}  # fmt: skip


class ScriptedDispatcher:
    """Answers each question with what ``script`` says: a body, an error, or a cut stream."""

    def __init__(self) -> None:
        self.script: dict[str, Any] = {}
        self.calls = 0

    async def complete(
        self, record: RequestRecord, body: Mapping[str, Any]
    ) -> tuple[Channel, tuple[bytes, dict[str, Any]]]:
        self.calls += 1
        answer = self.script[body["messages"][-1]["content"]]
        if isinstance(answer, Exception):
            raise answer
        return Channel(), (orjson.dumps(answer), answer)

    @asynccontextmanager
    async def open_stream(
        self, record: RequestRecord, body: Mapping[str, Any]
    ) -> AsyncIterator[tuple[Channel, AsyncIterator[bytes]]]:
        self.calls += 1
        cut = self.script[body["messages"][-1]["content"]] == "cut"

        async def payloads() -> AsyncIterator[bytes]:
            yield orjson.dumps({"id": "s", "choices": [{"index": 0, "delta": {"content": "Hal"}}]})
            if cut:
                raise UpstreamUnavailable("reset mid-stream", channel="up")
            yield orjson.dumps({"id": "s", "choices": [{"index": 0, "delta": {"content": "lo"},
                                                        "finish_reason": "stop"}]})  # fmt: skip
            yield b"[DONE]"

        yield Channel(), payloads()


def build(
    *, scopes: Mapping[str, str] | None = None
) -> tuple[Pipeline, ScriptedDispatcher, SemanticStage, AsyncHashingEmbedder]:
    embedder = AsyncHashingEmbedder()
    cache = SemanticCache(bounds=CacheBounds(3600, 100, 10_000_000),
                          rule=DecisionRule(threshold=0.9), clock=ManualClock())  # fmt: skip
    stage = SemanticStage(cache, embedder, stripper=NoiseStripper(), shared_scopes=scopes or {})
    dispatcher = ScriptedDispatcher()
    parts = PipelineParts(
        router=cast(Router, FixedRouter()), dispatcher=cast(Dispatcher, dispatcher),
        prices={"up": Price(1.0, 1.0)}, exact_cache=None, clock=ManualClock(), semantic=stage,
        uncacheable=compile_uncacheable([r"(?i)\bmy balance\b"]),
    )  # fmt: skip
    return Pipeline(parts), dispatcher, stage, embedder


def chat(question: str, *, stream: bool = False, **params: Any) -> ChatRequest:
    messages = [{"role": "user", "content": question}]
    body = {"model": "auto", "messages": messages, "stream": stream, **params}
    return ChatRequest("auto", messages, stream, False, body)


def record(tenant: str = "default") -> RequestRecord:
    r = RequestRecord(request_id="r", started_at=0.0)
    r.tenant = tenant
    return r


async def test_paraphrase_is_served_from_the_semantic_cache() -> None:
    pipeline, upstream, stage, embedder = build()
    upstream.script["How do I reset my password?"] = completion("Use the reset link.")
    first = record()
    await pipeline.complete(chat("How do I reset my password?"), first)
    assert first.cache is CacheOutcome.MISS and upstream.calls == 1
    second = record()
    result = await pipeline.complete(chat("how do I reset my password"), second)
    assert upstream.calls == 1 and second.cache is CacheOutcome.SEMANTIC
    assert orjson.loads(result.body)["choices"][0]["message"]["content"] == "Use the reset link."
    assert second.similarity is not None and second.similarity >= 0.9
    assert second.extra["cache_entry"] == first.extra["cache_entry"]
    assert second.extra["cache_checks"].startswith("threshold,numbers")
    # one embedding per request, available to the router through the record
    lazy = request_embedding(second)
    assert lazy is not None and lazy.computed and embedder.calls == 2
    await stage.aclose()


async def test_a_miss_refused_only_by_the_threshold_names_its_candidate() -> None:
    """What the near-miss audits read: the entry a lower threshold would have served."""
    pipeline, upstream, stage, _ = build()
    upstream.script["How do I reset my password?"] = completion("Use the reset link.")
    upstream.script["How do I reset my password on the app?"] = completion("In settings.")
    upstream.script["How do I reset my 2 passwords?"] = completion("One at a time.")
    first = record()
    await pipeline.complete(chat("How do I reset my password?"), first)
    stage.replace_decision(dataclasses.replace(stage.cache.rule, threshold=0.999), None)
    near = record()
    await pipeline.complete(chat("How do I reset my password on the app?"), near)
    assert near.cache is CacheOutcome.MISS and near.extra["cache_checks"].startswith("!threshold")
    assert near.extra["cache_near"] == first.extra["cache_entry"]
    assert near.similarity is not None and near.similarity < stage.threshold == 0.999
    stage.replace_decision(dataclasses.replace(stage.cache.rule, threshold=0.5), None)
    guarded = record()  # over the threshold, refused by a guard: not a near miss
    await pipeline.complete(chat("How do I reset my 2 passwords?"), guarded)
    assert guarded.cache is CacheOutcome.MISS and "!numbers" in guarded.extra["cache_checks"]
    assert "cache_near" not in guarded.extra
    await stage.aclose()


@pytest.mark.parametrize(
    "answer",
    [UpstreamUnavailable("down", channel="up"), completion("", finish="tool_calls", tool=True),
     completion("cut off", finish="content_filter")],
    ids=["error", "tool-call", "not-finished"],
)  # fmt: skip
async def test_errors_and_tool_calls_are_never_stored(answer: Any) -> None:
    pipeline, upstream, stage, _ = build()
    upstream.script["What is the weather in Paris?"] = answer
    with suppress(UpstreamUnavailable):
        await pipeline.complete(chat("What is the weather in Paris?"), record())
    assert (await stage.cache.stats())["entries"] == 0
    await stage.aclose()


async def test_a_cut_stream_is_never_stored_a_complete_one_is() -> None:
    pipeline, upstream, stage, _ = build()
    upstream.script["Tell me a story"] = "cut"
    with pytest.raises(UpstreamUnavailable):
        async with pipeline.stream(chat("Tell me a story", stream=True), record()) as events:
            async for _ in events:
                pass
    assert (await stage.cache.stats())["entries"] == 0
    upstream.script["Tell me a joke"] = "whole"
    async with pipeline.stream(chat("Tell me a joke", stream=True), record()) as events:
        async for _ in events:
            pass
    assert (await stage.cache.stats())["entries"] == 1
    hit = record()
    async with pipeline.stream(chat("tell me a joke", stream=True), hit) as events:
        text = b"".join([e async for e in events])
    assert hit.cache is CacheOutcome.SEMANTIC and b"Hallo" in text
    await stage.aclose()


async def test_uncacheable_questions_and_other_params_are_not_shared() -> None:
    pipeline, upstream, stage, _ = build()
    upstream.script["What is my balance?"] = completion("42")
    await pipeline.complete(chat("What is my balance?"), record())
    assert (await stage.cache.stats())["entries"] == 0  # the operator marked it uncacheable
    upstream.script["Name a colour"] = completion("Blue")
    await pipeline.complete(chat("Name a colour", temperature=0.2), record())
    other = record()
    await pipeline.complete(chat("Name a colour", temperature=0.9), other)
    assert other.cache is CacheOutcome.MISS and upstream.calls == 3
    await stage.aclose()


async def test_tenants_share_only_through_a_declared_scope() -> None:
    pipeline, upstream, stage, _ = build(scopes={"a": "support", "b": "support"})
    upstream.script["How do I pay?"] = completion("By card.")
    upstream.script["how do I pay"] = completion("Ask tenant c's desk.")
    await pipeline.complete(chat("How do I pay?"), record("a"))
    shared, alone = record("b"), record("c")
    await pipeline.complete(chat("how do I pay"), shared)
    await pipeline.complete(chat("how do I pay"), alone)
    assert shared.cache is CacheOutcome.SEMANTIC and alone.cache is CacheOutcome.MISS
    assert scope_of("a", {"a": "support"}) == "scope:support" and scope_of("c", {}) == "tenant:c"
    await stage.aclose()


class FakeReranker:
    def __init__(self, score: float | None) -> None:
        self._score = score
        self.asked: list[tuple[str, str]] = []

    async def score(self, question: str, candidate: str) -> float:
        self.asked.append((question, candidate))
        if self._score is None:
            raise TimeoutError("reranker down")
        return self._score

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize(("score", "hit"), [(0.9, True), (0.1, False), (None, False)])
async def test_the_reranker_has_the_last_word(score: float | None, hit: bool) -> None:
    pipeline, upstream, stage, _ = build()
    reranker = FakeReranker(score)
    stage._rerank = RerankStep(reranker, min_score=0.5)
    upstream.script["How do I reset my password?"] = completion("Use the reset link.")
    upstream.script["how do I reset my password"] = completion("Fresh answer.")
    await pipeline.complete(chat("How do I reset my password?"), record())
    second = record()
    await pipeline.complete(chat("how do I reset my password"), second)
    assert reranker.asked == [("how do I reset my password", "How do I reset my password?")]
    assert (second.cache is CacheOutcome.SEMANTIC) is hit
    checks = second.extra["cache_checks"]
    assert checks.endswith(",reranker") if hit else checks.endswith(",!reranker")
    await stage.aclose()


async def test_the_cosine_weight_lifts_a_low_reranker_score_and_reloads() -> None:
    pipeline, upstream, stage, _ = build()
    reranker = FakeReranker(0.2)  # below min_score on its own; + 1 * cosine (~0.99) above it
    stage._rerank = RerankStep(reranker, min_score=0.5, cosine_weight=1.0)
    upstream.script["How do I reset my password?"] = completion("Use the reset link.")
    upstream.script["how do I reset my password"] = completion("Fresh answer.")
    await pipeline.complete(chat("How do I reset my password?"), record())
    hit = record()
    await pipeline.complete(chat("how do I reset my password"), hit)
    assert hit.cache is CacheOutcome.SEMANTIC and hit.similarity is not None
    assert 0.2 + hit.similarity >= 0.5
    # a reload without the weight: the score alone decides
    stage.replace_decision(stage.cache.rule, RerankerConfig(kind="http", url="http://x/rerank"))
    miss = record()
    await pipeline.complete(chat("how do I reset my password"), miss)
    assert miss.cache is not CacheOutcome.SEMANTIC
    assert miss.extra["cache_checks"].endswith(",!reranker")
    await stage.aclose()


class TenantEcho(ScriptedDispatcher):
    """Every answer names the tenant it was made for."""

    async def complete(
        self, record: RequestRecord, body: Mapping[str, Any]
    ) -> tuple[Channel, tuple[bytes, dict[str, Any]]]:
        self.calls += 1
        answer = completion(f"for {record.tenant}")
        return Channel(), (orjson.dumps(answer), answer)


QUESTIONS = ["How do I pay?", "how do I pay", "How do I open an account?", "Opening hours?"]


@settings(max_examples=25, deadline=None)
@given(
    writes=st.lists(st.tuples(st.sampled_from("abcd"), st.sampled_from(QUESTIONS)), max_size=8),
    reader=st.sampled_from("abcd"),
    question=st.sampled_from(QUESTIONS),
    shared=st.dictionaries(st.sampled_from("abcd"), st.sampled_from(["s1", "s2"]), max_size=4),
)
async def test_no_answer_crosses_a_tenant_scope_through_the_pipeline(
    writes: list[tuple[str, str]], reader: str, question: str, shared: dict[str, str]
) -> None:
    pipeline, _, stage, _ = build(scopes=shared)
    echo = TenantEcho()
    pipeline._p = dataclasses.replace(pipeline._p, dispatcher=cast(Dispatcher, echo))
    for tenant, q in writes:
        await pipeline.complete(chat(q), record(tenant))
    read = record(reader)
    result = await pipeline.complete(chat(question), read)
    if read.cache is CacheOutcome.SEMANTIC:
        origin = orjson.loads(result.body)["choices"][0]["message"]["content"].split()[-1]
        assert scope_of(origin, shared) == scope_of(reader, shared)
    await stage.aclose()
