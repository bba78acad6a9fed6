"""Where the smart path's CPU goes: each stage timed in-process, one request at a time.

`bench overhead --pipeline full` measures the whole gateway under wrk; this splits one
request's CPU into its stages.  It builds the gateway's own parts from the same generated
config (the embedder, the semantic stage with its SQLite store, the router with the shipped
classifier) and drives requests through them sequentially, reading the process's CPU time
(every thread, the embedding engine's included) before and after each stage:

    prepare     noise stripping, the question and its bucket (``hygiene.py``)
    static      the static embedder's vector (``cache.semantic.cascade`` or
                ``routing.classifier.cascade`` on; 0 otherwise)
    embed       the question's e5 vector through the shared (batching) embedder; with the
                cache's cascade, only when a candidate clears the static bound (then with the
                candidate's e5 vector: the confirmation)
    search      the nearest stored question (the semantic cache's lookup minus the judge)
    guards      the decision rule's guards on the nearest candidate
    verifier    the learned pair verifier, when one is configured (0 otherwise)
    router      text features + the classifier over the (already computed) vector; with the
                router's cascade, the static student, and e5's vector when it defers
    store       the answer written to the cache: index + SQLite (on the request path
                unless ``cache.semantic.write_behind``)

One request at a time means no batching: the embed figure is the unbatched one; beside it,
the CPU per text of one call over ``BATCH`` texts (what batching under load comes close to).
The report puts ``rest`` beside them: the gateway's CPU per request under load minus these
stages, embed at its batched cost (HTTP in and out, JSON, the exact cache, the request log,
the event loop; approximate, since the batches under load vary in size).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from hybrid_gateway.api.runtime import wants_static
from hybrid_gateway.api.schema import parse_chat_request
from hybrid_gateway.cache.semantic import guards
from hybrid_gateway.cache.semantic.build import build_semantic_stage
from hybrid_gateway.cache.semantic.cache import SemanticCache
from hybrid_gateway.cache.semantic.cascade import CascadeRule
from hybrid_gateway.cache.semantic.hygiene import SemanticKey
from hybrid_gateway.cache.semantic.stage import SemanticStage
from hybrid_gateway.config import load_config
from hybrid_gateway.embedding.base import AsyncEmbedder, Vector
from hybrid_gateway.embedding.factory import build_embedder, build_static_embedder
from hybrid_gateway.embedding.lazy import request_embedding, static_embedding
from hybrid_gateway.resilience.clock import MonotonicClock
from hybrid_gateway.routing.build import build_router
from hybrid_gateway.routing.router import GatewayRouter
from hybrid_gateway.tools.overhead.prompts import prompt_text
from hybrid_gateway.types import RequestRecord, Usage

__all__ = ["STAGES", "StageProfile", "profile_stages"]

STAGES = ("prepare", "static", "embed", "search", "guards", "verifier", "router", "store")
T = TypeVar("T")
BATCH = 16  # texts in the batched-embedding figure (the default embedding.max_batch_size)
_ANSWER = b'{"choices": [{"message": {"role": "assistant", "content": "ok"}}]}'


@dataclass
class StageProfile:
    """Mean CPU milliseconds per request of each stage, for one prompt kind."""

    prompt: str
    requests: int
    cpu_ms: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    entries: int = 0  # semantic-cache entries at the end (what the search ran over)
    embed_batch_ms: float = 0.0  # embed's CPU per text in one call of BATCH texts
    embed_alone_ms: float = 0.0  # e5's CPU for one text alone (the embed stage's unit cost)

    @property
    def total_ms(self) -> float:
        return sum(self.cpu_ms.values())

    def to_json(self) -> dict[str, object]:
        return {
            "prompt": self.prompt,
            "requests": self.requests,
            "entries": self.entries,
            "cpu_ms_per_request": {k: round(v, 3) for k, v in self.cpu_ms.items()},
            "stages_total_ms": round(self.total_ms, 3),
            "embed_batch": BATCH,
            "embed_batch_ms_per_text": round(self.embed_batch_ms, 3),
            "embed_alone_ms": round(self.embed_alone_ms, 3),
        }


def profile_stages(config_path: Path, prompt: str, requests: int, warmup: int = 3) -> StageProfile:
    """Run ``warmup`` + ``requests`` unique requests of kind ``prompt`` through the stages."""
    return asyncio.run(_profile(config_path, prompt, requests, warmup))


async def _timed(sink: dict[str, float], stage: str, step: Callable[[], Awaitable[T]]) -> T:
    started = time.process_time()
    result = await step()
    sink[stage] += (time.process_time() - started) * 1000
    return result


async def _profile(config_path: Path, prompt: str, requests: int, warmup: int) -> StageProfile:
    config = load_config(config_path)
    embedder = build_embedder(config.embedding, config_path)
    static = build_static_embedder(config.embedding) if wants_static(config) else None
    stage = build_semantic_stage(config, config_path=config_path, clock=MonotonicClock(),
                                 embedder=embedder, static=static)  # fmt: skip
    router = build_router(config, config_path=config_path, embedder=embedder, static=static)
    cache = stage.cache
    assert isinstance(cache, SemanticCache)  # the bench config keeps the entries in-process
    token = uuid.uuid4().hex[:12]
    profile = StageProfile(prompt, requests)
    try:
        for n in range(1, warmup + requests + 1):
            sink = profile.cpu_ms if n > warmup else dict.fromkeys(STAGES, 0.0)
            await _one(stage, router, cache, prompt_text(prompt, f"{token}-0-{n}", n), sink)
        profile.cpu_ms = {k: v / max(requests, 1) for k, v in profile.cpu_ms.items()}
        profile.entries = cache.entries
        alone = [prompt_text(prompt, f"{token}-2-{n}", n) for n in range(1, 4)]
        started = time.process_time()
        for text in alone:
            await embedder.embed_one(text)
        profile.embed_alone_ms = (time.process_time() - started) * 1000 / len(alone)
        texts = [prompt_text(prompt, f"{token}-1-{n}", n) for n in range(1, BATCH + 1)]
        started = time.process_time()
        await embedder.embed_many(texts)
        profile.embed_batch_ms = (time.process_time() - started) * 1000 / BATCH
    finally:
        await stage.aclose()
        await embedder.aclose()
        if static is not None:
            await static.aclose()
    return profile


async def _one(
    stage: SemanticStage, router: GatewayRouter, cache: SemanticCache, text: str,
    sink: dict[str, float],
) -> None:  # fmt: skip
    body = {"model": "auto", "messages": [{"role": "user", "content": text}], "max_tokens": 16}
    request = parse_chat_request(body)
    record = RequestRecord(request_id=uuid.uuid4().hex, started_at=time.time())

    async def prepare() -> SemanticKey | None:
        return stage.prepare(request, record)

    key = await _timed(sink, "prepare", prepare)
    lazy = request_embedding(record)
    assert key is not None and lazy is not None
    static = static_embedding(record)
    if static is not None:  # the cache's cascade: the entries are indexed by static vectors
        vector = await _timed(sink, "static", static.vector)
    else:
        vector = await _timed(sink, "embed", lazy.vector)
    namespace = stage.namespace(record.tenant)
    found = await _timed(sink, "search", lambda: cache.lookup(namespace, key.bucket, key.question,
                                                              vector))  # fmt: skip
    if found.entry is not None and found.verdict is not None:
        judged = _judge_cpu(cache, key.question, found.entry.question, found.verdict.similarity,
                            (vector, found.entry.vector))  # fmt: skip
        sink["search"] -= judged[0] + judged[1]  # the lookup above included the judge
        sink["guards"] += judged[0]
        sink["verifier"] += judged[1]
        if static is not None and found.verdict.hit:  # e5 confirms: both questions' vectors
            candidate = found.entry.question
            await _timed(sink, "embed", lambda: _both(lazy.vector(), stage.embedder, candidate))
    await _timed(sink, "router", lambda: router.route(request, record))
    await _timed(sink, "store", lambda: cache.put(namespace, key.bucket, key.question, vector,
                                                  _ANSWER, Usage(10, 2)))  # fmt: skip


async def _both(question: Awaitable[Vector], e5: AsyncEmbedder, candidate: str) -> None:
    await question
    await e5.embed_one(candidate)


def _judge_cpu(cache: SemanticCache, question: str, candidate: str, similarity: float,
               vectors: tuple[Vector, Vector]) -> tuple[float, float]:  # fmt: skip
    """CPU ms of the guards and of the verifier on one candidate (the rule's own parts), when
    the rule ran them: at or above its threshold, which for the cache's cascade is the static
    bound (before 2026-12-05 this read e5's threshold, and a long lookup's guards stayed in
    ``search``)."""
    rule = cache.rule
    bound = rule.static_bound if isinstance(rule, CascadeRule) else rule.threshold
    if similarity < bound:
        return 0.0, 0.0
    started = time.process_time()
    result = guards.check(question, candidate, rule.guards)
    guard_ms = (time.process_time() - started) * 1000
    verifier_ms = 0.0
    if rule.verifier is not None and result.ok:
        started = time.process_time()
        rule.judge(question, candidate, similarity, vectors)
        verifier_ms = max((time.process_time() - started) * 1000 - guard_ms, 0.0)
    return guard_ms, verifier_ms
