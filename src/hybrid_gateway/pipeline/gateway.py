"""The request pipeline: explicit, ordered stages, one direction.

    1. key       canonical request key (pipeline/key.py)
    2. cache     exact hit -> answer at once, cost 0; then the semantic cache
                 (cache/semantic/stage.py): a paraphrase judged the same -> its answer, cost 0.
                 The request's question embedding is attached to the record here, computed
                 lazily, at most once, shared with the router (embedding/lazy.py).  A request
                 the operator marked uncacheable (``cache.semantic.uncacheable_patterns``) or
                 one asking for logprobs (which a cached answer does not keep) bypasses both
                 caches: neither looked up nor stored, ``cache=bypass``, the reason in
                 ``cache_checks``
    3. route     rules, then gates, exemplars and the classifier (routing/router.py), then the
                 tenant's tiers and budget (tenancy/tiers.py)
    4. dispatch  the lane's channel (or its backup while the breaker is open), with retries
                 before the first byte (resilience/dispatch.py); then relayed chunk by chunk
    5. settle    usage -> cost; complete answers -> cache

Each stage writes what it decided onto the ``RequestRecord``; the API layer turns that into
response headers, the request log and metrics.  Nothing here knows about HTTP.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Protocol

from hybrid_gateway.accounting.prices import Price
from hybrid_gateway.accounting.tokens import count_prompt_tokens, count_tokens
from hybrid_gateway.cache.exact import ExactCache
from hybrid_gateway.cache.semantic.hygiene import (
    NoiseStripper,
    SemanticKey,
    semantic_key,
    uncacheable_question,
)
from hybrid_gateway.cache.semantic.stage import SemanticStage
from hybrid_gateway.embedding.base import AsyncEmbedder
from hybrid_gateway.embedding.lazy import LazyEmbedding, attach_embedding
from hybrid_gateway.pipeline.key import request_key
from hybrid_gateway.pipeline.streaming import (
    StreamAssembler,
    replay_as_stream,
    replayable_choice,
    usage_from_completion,
)
from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.resilience.deadline import DeferredRunner
from hybrid_gateway.resilience.dispatch import Dispatcher
from hybrid_gateway.resilience.shedding import Shedder
from hybrid_gateway.routing.rules import message_text
from hybrid_gateway.types import (
    CacheLookup,
    CacheOutcome,
    ChatRequest,
    ChatResult,
    RequestRecord,
    RouteDecision,
    Usage,
)
from hybrid_gateway.upstreams.answers import UPSTREAM_MODEL, as_client_model, asked_choices
from hybrid_gateway.upstreams.sse import DONE_EVENT, comment


class Router(Protocol):
    async def route(
        self, request: ChatRequest, record: RequestRecord, *, embed: bool = True
    ) -> RouteDecision:
        """Rules, then the learned stages; ``embed=False`` never computes the embedding."""
        ...


class Audits(Protocol):
    """learning/auditor.py: may start a background audit of a settled answer; never waits."""

    def submit(self, request: ChatRequest, record: RequestRecord, body: bytes) -> None: ...


class Tiers(Protocol):
    """May move the decision to another lane, or refuse (402) when the tenant's budget is spent."""

    def apply(self, record: RequestRecord, decision: RouteDecision) -> RouteDecision: ...


@dataclass(frozen=True, slots=True)
class PipelineParts:
    router: Router
    dispatcher: Dispatcher
    prices: Mapping[str, Price]
    exact_cache: ExactCache | None
    clock: Clock
    # The tenant's lanes and budget, applied to the router's decision (tenancy/tiers.py).
    tiers: Tiers | None = None
    # Deadline fallback with later delivery (resilience/deadline.py); None: no lane has one.
    deferred: DeferredRunner | None = None
    # Cache-only answers for non-core traffic while errors spike (resilience/shedding.py).
    shedder: Shedder | None = None
    # The semantic cache (cache/semantic/stage.py); None: disabled.
    semantic: SemanticStage | None = None
    # The shared embedder: every request's record gets a lazily computed question vector.
    embedder: AsyncEmbedder | None = None
    # cache.semantic.uncacheable_patterns, compiled: questions kept out of both caches (also
    # while the semantic cache is off)
    uncacheable: tuple[re.Pattern[str], ...] = ()
    # learning.audit: settled answers handed over for sampled shadow audits (None: off).
    auditor: Audits | None = None


class Pipeline:
    def __init__(self, parts: PipelineParts) -> None:
        self._p = parts

    def replace_router(self, router: Router) -> None:
        """Hot reload (api/reload.py): one assignment; routed requests keep their decision."""
        self._p = replace(self._p, router=router)

    def replace_tiers(self, tiers: Tiers | None) -> None:
        """Hot reload of the tenants: the next request is tiered by the new lanes and budgets."""
        self._p = replace(self._p, tiers=tiers)

    # -- stages 1-3 ------------------------------------------------------------------------
    async def _lookup(self, request: ChatRequest, record: RequestRecord) -> CacheLookup:
        record.cache_key = key = request_key(request, record.tenant)
        question = self._attach_embedding(request, record)
        cache, semantic = self._p.exact_cache, self._p.semantic
        if cache is None and semantic is None:
            record.cache = CacheOutcome.BYPASS
            return CacheLookup(CacheOutcome.BYPASS, key)
        reason = self._bypass_reason(request, question)
        if reason is not None:  # neither looked up nor, later, stored (``_storable``)
            record.cache = CacheOutcome.BYPASS
            record.extra["cache_checks"] = reason
            record.extra[_KEPT_OUT] = True
            return CacheLookup(CacheOutcome.BYPASS, key)
        entry = await cache.get(key) if cache is not None else None
        if entry is None:
            hit = await semantic.lookup(record) if semantic is not None else None
            if hit is None:
                return CacheLookup(CacheOutcome.MISS, key)
            record.cache = CacheOutcome.SEMANTIC
            record.usage = hit.answer.usage
            return CacheLookup(CacheOutcome.SEMANTIC, key, hit.answer, hit.similarity)
        record.cache = CacheOutcome.EXACT
        record.similarity = 1.0
        record.usage = entry.usage
        return CacheLookup(CacheOutcome.EXACT, key, entry, 1.0)

    def _bypass_reason(self, request: ChatRequest, question: SemanticKey | None) -> str | None:
        """Why neither cache may answer this request nor keep its answer; None: both may.
        The operator's patterns are matched against the question as sent and noise-stripped
        (the stripper may remove the very id a pattern is aimed at, or the noise between its
        words)."""
        if uncacheable_question(self._p.uncacheable, request, question):
            return UNCACHEABLE
        body = request.body
        if body.get("logprobs") or body.get("top_logprobs") is not None:
            return "logprobs"  # a cached answer keeps no logprobs, and a replay has none
        return None

    def _attach_embedding(self, request: ChatRequest, record: RequestRecord) -> SemanticKey | None:
        """Attach the request's lazy question embedding; returns the question it embeds."""
        if self._p.semantic is not None:
            return self._p.semantic.prepare(request, record)
        if self._p.embedder is None:
            return None
        key = semantic_key(request, _DEFAULT_STRIPPER)
        if key is not None:
            attach_embedding(record, LazyEmbedding(self._p.embedder, key.question))
        return key

    async def _route(self, request: ChatRequest, record: RequestRecord) -> None:
        decision = await self._p.router.route(request, record)
        tiers = self._p.tiers
        record.route = decision if tiers is None else tiers.apply(record, decision)

    async def _note_saving(self, request: ChatRequest, record: RequestRecord, usage: Usage) -> None:
        """A cache hit costs nothing; record what the routed channel would have charged."""
        # Not worth an embedding: the learned stages run only if the vector already exists.
        decision = await self._p.router.route(request, record, embed=False)
        record.route = decision
        record.extra["saved_usd"] = self._p.prices[decision.channel].cost(usage)

    # -- non-streamed ----------------------------------------------------------------------
    async def complete(self, request: ChatRequest, record: RequestRecord) -> ChatResult:
        lookup = await self._lookup(request, record)
        if lookup.entry is not None:
            await self._note_saving(request, record, lookup.entry.usage)
            self._audit(request, record, lookup.entry.body)
            return ChatResult(lookup.entry.body, lookup.entry.usage)
        shedder = self._p.shedder
        if shedder is not None and shedder.sheds(request, record):
            return shedder.answer(request, record)
        await self._route(request, record)
        deferred = self._p.deferred
        if deferred is not None and deferred.covers(record):
            return await deferred.complete(request, record, lookup.key, self._call, self._open)
        result = await self._call(request, record, lookup.key)
        self._audit(request, record, result.body)
        return result

    def _audit(self, request: ChatRequest, record: RequestRecord, body: bytes) -> None:
        """The settled answer, for a sampled background audit (it never changes the answer)."""
        if self._p.auditor is not None:
            self._p.auditor.submit(request, record, body)

    async def _call(
        self, request: ChatRequest, record: RequestRecord, key: str, *, cache: bool = True
    ) -> ChatResult:
        """Dispatch, settle, cache (a deadline fallback's answer is not cached)."""
        started = self._p.clock.now()
        channel, (raw, parsed) = await self._p.dispatcher.complete(record, request.body)
        record.upstream_ms = (self._p.clock.now() - started) * 1000
        raw = as_client_model(raw, parsed, request.model, record)
        usage = usage_from_completion(parsed) or _estimate_usage(request, parsed)
        self._settle(record, channel.name, usage)
        if cache and _storable(record) and _complete_answer(parsed, asked_choices(request)):
            if self._p.exact_cache is not None:
                await self._p.exact_cache.put(key, raw, usage)
            if self._p.semantic is not None:
                await self._p.semantic.store(record, raw, usage)
        return ChatResult(raw, usage)

    # -- streamed --------------------------------------------------------------------------
    @asynccontextmanager
    async def stream(
        self, request: ChatRequest, record: RequestRecord
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """Open the answer stream; failures before the first byte raise from here."""
        lookup = await self._lookup(request, record)
        if lookup.entry is not None:
            await self._note_saving(request, record, lookup.entry.usage)
            self._audit(request, record, lookup.entry.body)
            yield _iterate(replay_as_stream(lookup.entry.body, include_usage=request.include_usage))
            return
        shedder = self._p.shedder
        if shedder is not None and shedder.sheds(request, record):
            shed = shedder.answer(request, record)
            yield _iterate(replay_as_stream(shed.body, include_usage=request.include_usage))
            return
        await self._route(request, record)
        deferred = self._p.deferred
        if deferred is not None and deferred.covers(record):
            async with deferred.stream(request, record, lookup.key, self._open) as events:
                yield events
            return
        async with self._open(request, record, lookup.key) as events:
            yield events

    @asynccontextmanager
    async def _open(
        self, request: ChatRequest, record: RequestRecord, key: str, *, cache: bool = True
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        started = self._p.clock.now()
        async with self._p.dispatcher.open_stream(record, request.body) as (channel, payloads):
            relay = self._relay(request, record, channel.name, payloads, started, key, cache)
            try:
                yield relay
            finally:
                # a client that hung up (or an upstream that broke) leaves the relay suspended:
                # close it now, so what was generated is billed before the request is logged
                await relay.aclose()
                if record.usage is None:  # never started: the upstream had the prompt
                    prompt = Usage(_prompt_estimate(request), 0, estimated=True)
                    self._settle(record, channel.name, prompt)

    async def _relay(
        self,
        request: ChatRequest,
        record: RequestRecord,
        channel: str,
        payloads: AsyncIterator[bytes],
        started: float,
        key: str,
        cache: bool = True,
    ) -> AsyncGenerator[bytes, None]:
        assembler = StreamAssembler(include_usage=request.include_usage, model=request.model)
        clock = self._p.clock
        try:
            async for payload in payloads:
                if record.ttft_ms is None:
                    record.ttft_ms = (clock.now() - started) * 1000
                out = assembler.feed(payload)
                if out is not None:
                    yield out
                if assembler.done:
                    break
        finally:  # also when the client hangs up or the upstream breaks: bill what came
            record.upstream_ms = (clock.now() - started) * 1000
            # the estimate (a tokenizer pass over the whole prompt) only when no usage came
            usage = assembler.usage or assembler.final_usage(_prompt_estimate(request))
            self._settle(record, channel, usage)
            if not assembler.done:
                record.extra["stream_incomplete"] = True
            if assembler.upstream_model is not None:
                record.extra[UPSTREAM_MODEL] = assembler.upstream_model
        if assembler.usage is None and request.include_usage:
            yield assembler.usage_event(usage)
        choices_ok = assembler.choices == asked_choices(request)  # never cache n=2 with 1
        if cache and _storable(record) and assembler.cacheable and choices_ok:
            body = assembler.completion_body(usage)
            if self._p.exact_cache is not None:
                await self._p.exact_cache.put(key, body, usage)
            if self._p.semantic is not None:
                await self._p.semantic.store(record, body, usage)
        if self._p.auditor is not None and assembler.done:
            self._audit(request, record, assembler.completion_body(usage))
        yield comment(f"x-gateway-cost-usd={record.cost_usd:.8f}")
        yield DONE_EVENT

    def _settle(self, record: RequestRecord, channel: str, usage: Usage) -> None:
        record.usage = usage
        record.cost_usd = self._p.prices[channel].cost(usage)


_DEFAULT_STRIPPER = NoiseStripper()
UNCACHEABLE = "uncacheable"  # cache_checks of a question the operator marked uncacheable


async def _iterate(events: list[bytes]) -> AsyncIterator[bytes]:
    for event in events:
        yield event


_KEPT_OUT = "cache_kept_out"  # record.extra: the question may not be cached (``_bypass_reason``)


def _storable(record: RequestRecord) -> bool:
    """The answer of a question kept out of the caches (uncacheable, logprobs) is not stored
    (the shadow of a deadline call copies this), nor one a budget downgrade made: the cheaper
    lane's answer would outlive the downgrade (an exact request for ``heavy`` served the light
    model's answer after the budget resets).  A request whose *semantic* lookup was skipped
    under load (``bypass`` with ``embedder_busy``, ``embedder_slow``...) is stored: the exact
    cache then serves its next asking, and the semantic stage decides what it keeps itself."""
    downgraded = record.route is not None and record.route.downgraded
    return not record.extra.get(_KEPT_OUT) and not downgraded


def _complete_answer(body: Mapping[str, object], asked: int) -> bool:
    """Finished, with as many choices as ``n`` asked (an upstream that ignores ``n`` answers
    with one), and nothing in it that ``replay_as_stream`` would drop (tool calls, refusal,
    audio, reasoning, logprobs): a cached body is replayed to streaming clients too."""
    choices = body.get("choices")
    return (
        isinstance(choices, list) and len(choices) == asked and all(map(replayable_choice, choices))
    )


def _prompt_estimate(request: ChatRequest) -> int:
    return count_prompt_tokens(message_text(m.get("content")) for m in request.messages)


def _estimate_usage(request: ChatRequest, body: Mapping[str, object]) -> Usage:
    text = ""
    choices = body.get("choices")
    if isinstance(choices, list):
        for choice in choices:
            message = choice.get("message") if isinstance(choice, dict) else None
            if isinstance(message, dict):
                text += message_text(message.get("content"))
    return Usage(_prompt_estimate(request), count_tokens(text), estimated=True)
