"""The request pipeline: explicit, ordered stages, one direction.

    1. key       canonical request key (pipeline/key.py)
    2. cache     exact hit -> answer at once, cost 0
    3. route     rules (the classifier and semantic cache plug in here in their own issues)
    4. dispatch  the lane's channel (or its backup while the breaker is open), with retries
                 before the first byte (resilience/dispatch.py); then relayed chunk by chunk
    5. settle    usage -> cost; complete answers -> cache

Each stage writes what it decided onto the ``RequestRecord``; the API layer turns that into
response headers, the request log and metrics.  Nothing here knows about HTTP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

from hybrid_gateway.accounting.prices import Price
from hybrid_gateway.accounting.tokens import count_prompt_tokens, count_tokens
from hybrid_gateway.cache.exact import ExactCache
from hybrid_gateway.pipeline.key import request_key
from hybrid_gateway.pipeline.streaming import (
    CACHEABLE_FINISH,
    StreamAssembler,
    replay_as_stream,
    usage_from_completion,
)
from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.resilience.dispatch import Dispatcher
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
from hybrid_gateway.upstreams.sse import DONE_EVENT, comment


class Router(Protocol):
    def route(self, request: ChatRequest) -> RouteDecision: ...


@dataclass(frozen=True, slots=True)
class PipelineParts:
    router: Router
    dispatcher: Dispatcher
    prices: Mapping[str, Price]
    exact_cache: ExactCache | None
    clock: Clock


class Pipeline:
    def __init__(self, parts: PipelineParts) -> None:
        self._p = parts

    # -- stages 1-3 ------------------------------------------------------------------------
    async def _lookup(self, request: ChatRequest, record: RequestRecord) -> CacheLookup:
        record.cache_key = key = request_key(request, record.tenant)
        cache = self._p.exact_cache
        if cache is None:
            record.cache = CacheOutcome.BYPASS
            return CacheLookup(CacheOutcome.BYPASS, key)
        entry = await cache.get(key)
        if entry is None:
            return CacheLookup(CacheOutcome.MISS, key)
        record.cache = CacheOutcome.EXACT
        record.similarity = 1.0
        record.usage = entry.usage
        return CacheLookup(CacheOutcome.EXACT, key, entry, 1.0)

    def _route(self, request: ChatRequest, record: RequestRecord) -> None:
        record.route = self._p.router.route(request)

    def _note_saving(self, request: ChatRequest, record: RequestRecord, usage: Usage) -> None:
        """A cache hit costs nothing; record what the routed channel would have charged."""
        decision = self._p.router.route(request)
        record.route = decision
        record.extra["saved_usd"] = self._p.prices[decision.channel].cost(usage)

    # -- non-streamed ----------------------------------------------------------------------
    async def complete(self, request: ChatRequest, record: RequestRecord) -> ChatResult:
        lookup = await self._lookup(request, record)
        if lookup.entry is not None:
            self._note_saving(request, record, lookup.entry.usage)
            return ChatResult(lookup.entry.body, lookup.entry.usage)
        self._route(request, record)
        started = self._p.clock.now()
        channel, (raw, parsed) = await self._p.dispatcher.complete(record, request.body)
        record.upstream_ms = (self._p.clock.now() - started) * 1000
        usage = usage_from_completion(parsed) or _estimate_usage(request, parsed)
        self._settle(record, channel.name, usage)
        if self._p.exact_cache is not None and _complete_answer(parsed):
            await self._p.exact_cache.put(lookup.key, raw, usage)
        return ChatResult(raw, usage)

    # -- streamed --------------------------------------------------------------------------
    @asynccontextmanager
    async def stream(
        self, request: ChatRequest, record: RequestRecord
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """Open the answer stream; failures before the first byte raise from here."""
        lookup = await self._lookup(request, record)
        if lookup.entry is not None:
            self._note_saving(request, record, lookup.entry.usage)
            yield _iterate(replay_as_stream(lookup.entry.body, include_usage=request.include_usage))
            return
        self._route(request, record)
        started = self._p.clock.now()
        async with self._p.dispatcher.open_stream(record, request.body) as (channel, payloads):
            yield self._relay(request, record, channel.name, payloads, started, lookup.key)

    async def _relay(
        self,
        request: ChatRequest,
        record: RequestRecord,
        channel: str,
        payloads: AsyncIterator[bytes],
        started: float,
        key: str,
    ) -> AsyncIterator[bytes]:
        assembler = StreamAssembler(include_usage=request.include_usage)
        clock = self._p.clock
        async for payload in payloads:
            if record.ttft_ms is None:
                record.ttft_ms = (clock.now() - started) * 1000
            out = assembler.feed(payload)
            if out is not None:
                yield out
            if assembler.done:
                break
        record.upstream_ms = (clock.now() - started) * 1000
        usage = assembler.final_usage(_prompt_estimate(request))
        self._settle(record, channel, usage)
        if assembler.usage is None and request.include_usage:
            yield assembler.usage_event(usage)
        if not assembler.done:
            record.extra["stream_incomplete"] = True
        if assembler.cacheable and self._p.exact_cache is not None:
            await self._p.exact_cache.put(key, assembler.completion_body(usage), usage)
        yield comment(f"x-gateway-cost-usd={record.cost_usd:.8f}")
        yield DONE_EVENT

    def _settle(self, record: RequestRecord, channel: str, usage: Usage) -> None:
        record.usage = usage
        record.cost_usd = self._p.prices[channel].cost(usage)


async def _iterate(events: list[bytes]) -> AsyncIterator[bytes]:
    for event in events:
        yield event


def _complete_answer(body: Mapping[str, object]) -> bool:
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        return False
    for choice in choices:
        if not isinstance(choice, dict) or choice.get("finish_reason") not in CACHEABLE_FINISH:
            return False
        message = choice.get("message")
        if (
            not isinstance(message, dict)
            or message.get("tool_calls")
            or message.get("function_call")
        ):
            return False
    return True


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
