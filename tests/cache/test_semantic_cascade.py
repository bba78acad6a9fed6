"""The semantic cache's static-then-e5 cascade: a certain miss never asks e5, a plausible hit
is e5's to decide, and an e5 that fails or stalls makes a bypass, never a failed request."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import cast

import numpy as np
import orjson
import pytest
from pydantic import ValidationError

from hybrid_gateway.accounting.prices import Price
from hybrid_gateway.cache.exact import MemoryExactCache
from hybrid_gateway.cache.semantic.build import build_cascade
from hybrid_gateway.cache.semantic.cache import CacheBounds, SemanticCache
from hybrid_gateway.cache.semantic.cascade import CascadeRule, CascadeStep
from hybrid_gateway.cache.semantic.decision import DecisionRule
from hybrid_gateway.cache.semantic.hygiene import NoiseStripper, compile_uncacheable
from hybrid_gateway.cache.semantic.settings import SemanticCacheConfig
from hybrid_gateway.cache.semantic.stage import SemanticStage
from hybrid_gateway.config import GatewayConfig
from hybrid_gateway.embedding.base import Vector
from hybrid_gateway.embedding.batching import EmbedderSaturated
from hybrid_gateway.embedding.lazy import request_embedding
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.pipeline.gateway import Pipeline, PipelineParts, Router
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.resilience.dispatch import Dispatcher
from hybrid_gateway.types import CacheOutcome
from tests.cache.test_semantic_pipeline import (
    FixedRouter,
    ScriptedDispatcher,
    chat,
    completion,
    record,
)

RESET, RESET2, NEAR, WEATHER = ("reset my password", "how to reset my password",
                                "reset my username", "weather today")  # fmt: skip


def _unit(*values: float) -> Vector:
    v = np.array(values, dtype=np.float32)
    return v / np.linalg.norm(v)


class Scripted:
    """An ``AsyncEmbedder`` with a vector per text, counting what it was asked."""

    def __init__(self, name: str, vectors: Mapping[str, Vector]) -> None:
        self.namespace = f"{name}@1"
        self.vectors = vectors
        self.asked: list[str] = []
        self.failure: Exception | None = None
        self.stall = asyncio.Event()  # set: answer; never set while stalling
        self.stall.set()

    async def embed_one(self, text: str) -> Vector:
        self.asked.append(text)
        await self.stall.wait()
        if self.failure is not None:
            raise self.failure
        return self.vectors[text]


# static: the three reset questions are near each other, the weather far; e5: only the two
# password questions are the same question
STATIC = {RESET: _unit(1, 0, 0), RESET2: _unit(1, 0.1, 0), NEAR: _unit(1, 0.2, 0),
          WEATHER: _unit(0, 0, 1)}  # fmt: skip
E5 = {RESET: _unit(1, 0, 0), RESET2: _unit(1, 0.01, 0), NEAR: _unit(1, 1, 0),
      WEATHER: _unit(0, 0, 1)}  # fmt: skip


def build(
    timeout_s: float | None = None, exact: MemoryExactCache | None = None
) -> tuple[Pipeline, SemanticStage, Scripted, Scripted]:
    static, e5 = Scripted("static", STATIC), Scripted("e5", E5)
    rule = DecisionRule(threshold=0.99, guards=())
    cache = SemanticCache(bounds=CacheBounds(3600, 100, 10_000_000), rule=rule, clock=ManualClock())
    step = CascadeStep(static, static_bound=0.9, timeout_s=timeout_s)
    stage = SemanticStage(cache, e5, stripper=NoiseStripper(), shared_scopes={}, cascade=step)
    dispatcher = ScriptedDispatcher()
    for q in (RESET, RESET2, NEAR, WEATHER):
        dispatcher.script[q] = completion(f"answer to {q}")
    parts = PipelineParts(
        router=cast(Router, FixedRouter()), dispatcher=cast(Dispatcher, dispatcher),
        prices={"up": Price(1.0, 1.0)}, exact_cache=exact, clock=ManualClock(), semantic=stage,
        uncacheable=compile_uncacheable([]),
    )  # fmt: skip
    return Pipeline(parts), stage, static, e5


def answer(body: bytes) -> str:
    return str(orjson.loads(body)["choices"][0]["message"]["content"])


async def test_a_certain_miss_never_asks_e5() -> None:
    pipeline, stage, static, e5 = build()
    first, second = record(), record()
    await pipeline.complete(chat(RESET), first)
    await pipeline.complete(chat(WEATHER), second)
    assert first.cache is CacheOutcome.MISS and second.cache is CacheOutcome.MISS
    assert second.extra["cache_checks"] == "!static_bound"
    assert "cache_near" not in second.extra  # no e5 similarity: not a near miss
    assert e5.asked == [] and static.asked == [RESET, WEATHER]
    lazy = request_embedding(second)  # the router's e5 vector: not computed by the cache
    assert lazy is not None and not lazy.computed
    assert stage.namespace("default").embedder == "static@1"
    assert (await stage.cache.stats())["entries"] == 2  # stored under their static vectors
    await stage.aclose()


async def test_a_near_neighbour_is_e5s_to_decide() -> None:
    pipeline, stage, _, e5 = build()
    await pipeline.complete(chat(RESET), record())
    hit = record()
    result = await pipeline.complete(chat(RESET2), hit)
    assert hit.cache is CacheOutcome.SEMANTIC and answer(result.body) == f"answer to {RESET}"
    assert sorted(e5.asked) == sorted([RESET2, RESET])
    assert hit.similarity == pytest.approx(float(E5[RESET] @ E5[RESET2]))
    assert hit.extra["cache_checks"] == "static_bound,e5"
    near = record()
    result = await pipeline.complete(chat(NEAR), near)  # static says maybe, e5 says no
    assert near.cache is CacheOutcome.MISS and answer(result.body) == f"answer to {NEAR}"
    assert near.extra["cache_checks"] == "static_bound,!e5"
    assert near.extra["cache_near"] == hit.extra["cache_entry"]  # e5's threshold alone said no
    assert near.similarity is not None and near.similarity < stage.threshold  # e5's cosine
    assert "cache_near" not in hit.extra
    await stage.aclose()


@pytest.mark.parametrize(
    ("failure", "checks"),
    [(RuntimeError("e5 down"), "embedder_error"), (EmbedderSaturated("full"), "embedder_busy")],
)
async def test_an_e5_that_fails_is_a_bypass(failure: Exception, checks: str) -> None:
    pipeline, stage, _, e5 = build()
    await pipeline.complete(chat(RESET), record())
    e5.failure = failure
    second = record()
    result = await pipeline.complete(chat(RESET2), second)
    assert answer(result.body) == f"answer to {RESET2}"  # from upstream
    assert second.cache is CacheOutcome.BYPASS and second.extra["cache_checks"] == checks
    await stage.aclose()


async def test_an_e5_that_stalls_is_a_bypass_after_the_timeout() -> None:
    pipeline, stage, _, e5 = build(timeout_s=0.01)
    await pipeline.complete(chat(RESET), record())
    e5.stall.clear()
    second = record()
    result = await pipeline.complete(chat(RESET2), second)
    assert answer(result.body) == f"answer to {RESET2}"
    assert second.cache is CacheOutcome.BYPASS and second.extra["cache_checks"] == "embedder_slow"
    await stage.aclose()


async def test_a_bypassed_answer_is_kept_for_the_next_asking() -> None:
    """A lookup e5 could not confirm in time skips the semantic decision, not the caches: the
    exact cache keeps the answer (the same request again is an exact hit, not a second upstream
    call) and the semantic cache stores it under its static vector."""
    exact = MemoryExactCache(ttl_s=3600, max_entries=100, max_bytes=1_000_000, clock=ManualClock())
    pipeline, stage, _, e5 = build(timeout_s=0.01, exact=exact)
    await pipeline.complete(chat(RESET), record())
    e5.stall.clear()
    second = record()
    await pipeline.complete(chat(RESET2), second)
    assert second.cache is CacheOutcome.BYPASS and second.extra["cache_checks"] == "embedder_slow"
    assert (await stage.cache.stats())["entries"] == 2  # RESET, and RESET2 under its static vector
    again = record()
    result = await pipeline.complete(chat(RESET2), again)
    assert again.cache is CacheOutcome.EXACT and answer(result.body) == f"answer to {RESET2}"
    e5.stall.set()
    await stage.aclose()


async def test_an_e5_expected_too_late_is_a_bypass_before_any_work() -> None:
    pipeline, stage, _, e5 = build(timeout_s=0.2)
    await pipeline.complete(chat(RESET), record())
    waits: list[list[str]] = []

    def expected_ms(texts: list[str]) -> float:  # a backed-up queue: 5 s away
        waits.append(list(texts))
        return 5000.0

    e5.expected_ms = expected_ms  # type: ignore[attr-defined]
    asked = len(e5.asked)
    second = record()
    result = await pipeline.complete(chat(RESET2), second)
    assert answer(result.body) == f"answer to {RESET2}"
    assert second.cache is CacheOutcome.BYPASS and second.extra["cache_checks"] == "embedder_slow"
    assert waits == [[RESET2, RESET]] and len(e5.asked) == asked  # nothing was sent to e5
    await stage.aclose()


async def test_a_hot_reload_moves_e5s_threshold_and_keeps_the_bound() -> None:
    pipeline, stage, _, _ = build()
    assert stage.cache.rule.threshold == 0.99  # what stats, reloads and learning see: e5's
    # the learned threshold's move: replace the rule's threshold (learning/build.py)
    stage.replace_decision(dataclasses.replace(stage.cache.rule, threshold=0.99999), None)
    rule = stage.cache.rule
    assert isinstance(rule, CascadeRule) and rule.static_bound == 0.9
    assert rule.threshold == 0.99999
    await pipeline.complete(chat(RESET), record())
    second = record()
    await pipeline.complete(chat(RESET2), second)
    assert second.cache is CacheOutcome.MISS and second.extra["cache_checks"] == "static_bound,!e5"
    await stage.aclose()


def test_config_is_checked() -> None:
    cascade = {"static_bound": 0.8}
    with pytest.raises(ValidationError, match="verifier"):
        SemanticCacheConfig.model_validate(
            {"cascade": cascade, "verifier": "v.npz", "verifier_threshold": 0.5}
        )
    with pytest.raises(ValidationError):
        SemanticCacheConfig.model_validate({"cascade": {"static_bound": 1.5}})
    assert SemanticCacheConfig().cascade is None  # off by default
    base = {"channels": {"c": {"base_url": "http://x/v1", "model": "m"}},
            "lanes": {"light": {"channel": "c"}, "heavy": {"channel": "c"}}}  # fmt: skip
    config = GatewayConfig.model_validate({
        **base, "embedding": {"backend": "static"},
        "cache": {"semantic": {"enabled": True, "cascade": cascade}}})  # fmt: skip
    with pytest.raises(ConfigError, match=r"cache\.semantic\.cascade"):
        build_cascade(config, None)


@pytest.mark.parametrize("cascade", [True, False])
async def test_the_static_index_is_prefiltered_from_fewer_entries(cascade: bool) -> None:
    from hybrid_gateway.cache.semantic.build import build_semantic_stage
    from hybrid_gateway.cache.semantic.index import EXACT_UP_TO, STATIC_EXACT_UP_TO, NumpyIndex
    from hybrid_gateway.config import parse_config
    from tests.test_config import minimal

    semantic: dict[str, object] = {"enabled": True}
    if cascade:
        semantic["cascade"] = {"static_bound": 0.9}
    config = parse_config(minimal(cache={"semantic": semantic}))
    e5, static = Scripted("e5", E5), Scripted("static", STATIC)
    stage = build_semantic_stage(config, config_path=None, clock=ManualClock(), embedder=e5,
                                 static=static)  # fmt: skip
    index = cast(SemanticCache, stage.cache)._index
    assert isinstance(index, NumpyIndex)
    assert index._exact_up_to == (STATIC_EXACT_UP_TO if cascade else EXACT_UP_TO)
    await stage.aclose()
