"""What the pipeline keeps in and serves from both caches: never an uncacheable question, a
request asking for logprobs, or an answer a replay would not reproduce."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import orjson
import pytest

from hybrid_gateway.accounting.prices import Price
from hybrid_gateway.cache.exact import MemoryExactCache
from hybrid_gateway.cache.semantic.cache import CacheBounds, SemanticCache
from hybrid_gateway.cache.semantic.decision import DecisionRule
from hybrid_gateway.cache.semantic.hygiene import NoiseStripper, compile_uncacheable
from hybrid_gateway.cache.semantic.stage import SemanticStage
from hybrid_gateway.observability.request_log import SqliteRequestLog
from hybrid_gateway.pipeline.gateway import Pipeline, PipelineParts, Router
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.resilience.dispatch import Dispatcher
from hybrid_gateway.types import CacheOutcome, ChatRequest, RequestRecord, RouteDecision
from tests.cache.test_semantic_pipeline import Channel, FixedRouter, chat, completion, record
from tests.embedding.fakes import AsyncHashingEmbedder

UNCACHEABLE = [r"\bmy balance\b", r"\buser_[a-z0-9]+\b"]


class Upstream:
    """Answers every question with ``answer`` (non-streamed) or the ``chunks`` (streamed)."""

    def __init__(self) -> None:
        self.answer: dict[str, Any] = completion("42")
        self.chunks: list[dict[str, Any]] = []
        self.calls = 0

    async def complete(
        self, record: RequestRecord, body: Mapping[str, Any]
    ) -> tuple[Channel, tuple[bytes, dict[str, Any]]]:
        self.calls += 1
        return Channel(), (orjson.dumps(self.answer), self.answer)

    @asynccontextmanager
    async def open_stream(
        self, record: RequestRecord, body: Mapping[str, Any]
    ) -> AsyncIterator[tuple[Channel, AsyncIterator[bytes]]]:
        self.calls += 1

        async def payloads() -> AsyncIterator[bytes]:
            for chunk in self.chunks:
                yield orjson.dumps({"id": "s", "object": "chat.completion.chunk", **chunk})
            yield b"[DONE]"

        yield Channel(), payloads()


class Stack:
    def __init__(self) -> None:
        clock = ManualClock()
        self.exact = MemoryExactCache(ttl_s=3600, max_entries=100, max_bytes=1_000_000,
                                      clock=clock)  # fmt: skip
        cache = SemanticCache(bounds=CacheBounds(3600, 100, 10_000_000),
                              rule=DecisionRule(threshold=0.9), clock=clock)  # fmt: skip
        self.semantic = SemanticStage(cache, AsyncHashingEmbedder(), stripper=NoiseStripper(),
                                      shared_scopes={})  # fmt: skip
        self.upstream = Upstream()
        self.pipeline = Pipeline(PipelineParts(
            router=cast(Router, FixedRouter()), dispatcher=cast(Dispatcher, self.upstream),
            prices={"up": Price(1.0, 1.0)}, exact_cache=self.exact, clock=clock,
            semantic=self.semantic, uncacheable=compile_uncacheable(UNCACHEABLE),
        ))  # fmt: skip

    async def ask(self, request: ChatRequest) -> tuple[RequestRecord, bytes]:
        rec = record()
        if request.stream:
            async with self.pipeline.stream(request, rec) as events:
                body = b"".join([event async for event in events])
        else:
            body = (await self.pipeline.complete(request, rec)).body
        return rec, body

    async def stored(self) -> tuple[int, int]:
        """(exact entries, semantic entries)"""
        entries = (await self.semantic.cache.stats())["entries"]
        assert isinstance(entries, int)
        return self.exact.entries, entries


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    built = Stack()
    yield built
    await built.semantic.aclose()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "question",
    ["What is my balance?",
     "List the orders of user_8f3k2j"],  # the stripper removes the id the pattern is aimed at
    ids=["pattern", "pattern-on-the-raw-text"],
)  # fmt: skip
async def test_an_uncacheable_question_bypasses_both_caches(
    stack: Stack, question: str, stream: bool
) -> None:
    stack.upstream.chunks = [{"choices": [{"index": 0, "delta": {"content": "42"},
                                           "finish_reason": "stop"}]}]  # fmt: skip
    for _ in range(2):
        rec, _ = await stack.ask(chat(question, stream=stream))
        assert rec.cache is CacheOutcome.BYPASS
        assert rec.extra["cache_checks"] == "uncacheable"
    assert stack.upstream.calls == 2  # the identical second request was not served stale
    assert await stack.stored() == (0, 0)


async def test_a_cacheable_question_is_still_cached(stack: Stack) -> None:
    await stack.ask(chat("Name a colour"))
    again, _ = await stack.ask(chat("Name a colour"))
    assert again.cache is CacheOutcome.EXACT and stack.upstream.calls == 1


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("params", [{"logprobs": True}, {"logprobs": True, "top_logprobs": 2}])
async def test_a_request_for_logprobs_is_neither_served_nor_stored(
    stack: Stack, params: dict[str, Any], stream: bool
) -> None:
    stack.upstream.answer = completion("Blue")
    stack.upstream.answer["choices"][0]["logprobs"] = {"content": [{"token": "Blue"}]}
    stack.upstream.chunks = [{"choices": [{"index": 0, "delta": {"content": "Blue"},
                                           "logprobs": {"content": [{"token": "Blue"}]},
                                           "finish_reason": "stop"}]}]  # fmt: skip
    for _ in range(2):
        rec, body = await stack.ask(chat("Name a colour", stream=stream, **params))
        assert rec.cache is CacheOutcome.BYPASS and rec.extra["cache_checks"] == "logprobs"
        assert b'"logprobs":{' in body
    assert stack.upstream.calls == 2 and await stack.stored() == (0, 0)


@pytest.mark.parametrize(
    "message",
    [{"content": "", "refusal": "I can't help with that."},
     {"content": None, "audio": {"id": "a1", "data": "UklGR", "transcript": "Hi"}},
     {"content": "Hi", "reasoning_content": "The user greets me."},
     {"content": [{"type": "text", "text": "Hi"}]}],
    ids=["refusal", "audio", "reasoning", "content-parts"],
)  # fmt: skip
async def test_an_answer_a_replay_would_not_reproduce_is_not_stored(
    stack: Stack, message: dict[str, Any]
) -> None:
    stack.upstream.answer = completion("")
    stack.upstream.answer["choices"][0]["message"] = {"role": "assistant", **message}
    await stack.ask(chat("Say hi"))
    streamed, _ = await stack.ask(chat("Say hi", stream=True))
    assert streamed.cache is CacheOutcome.MISS and stack.upstream.calls == 2
    assert await stack.stored() == (0, 0)


async def test_empty_extra_fields_do_not_stop_caching(stack: Stack) -> None:
    stack.upstream.answer = completion("Hi")
    stack.upstream.answer["choices"][0]["message"] |= {"refusal": None, "annotations": [],
                                                       "tool_calls": []}  # fmt: skip
    stack.upstream.answer["choices"][0]["logprobs"] = None
    await stack.ask(chat("Say hi"))
    assert await stack.stored() == (1, 1)


@pytest.mark.parametrize(
    "chunks",
    [
        # n=2: choice 1 is still open at [DONE]
        [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": "A"}},
                      {"index": 1, "delta": {"role": "assistant", "content": "B, and"}}]},
         {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}],
        # the reasoning text would be lost, the replay would be an empty answer
        [{"choices": [{"index": 0, "delta": {"reasoning_content": "Let me think"}}]},
         {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}],
        [{"choices": [{"index": 0, "delta": {"role": "assistant", "refusal": "No."}}]},
         {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}],
    ],
    ids=["n2-one-choice-open", "reasoning", "refusal"],
)  # fmt: skip
async def test_a_stream_a_replay_would_not_reproduce_is_not_stored(
    stack: Stack, chunks: list[dict[str, Any]]
) -> None:
    stack.upstream.chunks = chunks
    for _ in range(2):
        rec, _ = await stack.ask(chat("Pick a letter", stream=True, n=2))
        assert rec.cache is CacheOutcome.MISS
    assert stack.upstream.calls == 2 and await stack.stored() == (0, 0)


async def test_the_request_log_keeps_the_checks_and_the_entry(stack: Stack, tmp_path: Path) -> None:
    stored, _ = await stack.ask(chat("How do I reset my password?"))
    hit, _ = await stack.ask(chat("how do I reset my password"))
    bypassed, _ = await stack.ask(chat("What is my balance?"))
    assert hit.cache is CacheOutcome.SEMANTIC
    log = SqliteRequestLog(tmp_path / "requests.sqlite3", flush_interval_s=3600)
    for i, each in enumerate([stored, hit, bypassed]):
        each.request_id = f"req_{i}"
        log.write(each)
    log.flush()
    rows = log.query("SELECT cache, similarity, cache_checks, cache_entry FROM requests "
                     "ORDER BY request_id")  # fmt: skip
    log.close()
    entry = stored.extra["cache_entry"]
    assert isinstance(entry, int)
    assert rows[0] == ("miss", None, None, entry)  # stored as this entry
    assert rows[1][0] == "semantic" and rows[1][1] == hit.similarity
    assert rows[1][2:] == (hit.extra["cache_checks"], entry)
    assert rows[1][2].startswith("threshold,")
    assert rows[2] == ("bypass", None, "uncacheable", None)


class DowngradedRouter:
    """What the tiers make of a route while the tenant's budget is spent."""

    async def route(
        self, request: ChatRequest, record: RequestRecord, *, embed: bool = True
    ) -> RouteDecision:
        return RouteDecision("light", "up", "default+budget:heavy->light", downgraded=True)


@pytest.mark.parametrize("stream", [False, True])
async def test_an_answer_made_under_a_budget_downgrade_is_not_stored(
    stack: Stack, stream: bool
) -> None:
    stack.upstream.chunks = [{"choices": [{"index": 0, "delta": {"content": "42"},
                                           "finish_reason": "stop"}]}]  # fmt: skip
    stack.pipeline.replace_router(cast(Router, DowngradedRouter()))
    for _ in range(2):
        rec, _ = await stack.ask(chat("What is the meaning of life?", stream=stream))
        assert rec.cache is CacheOutcome.MISS
    assert stack.upstream.calls == 2 and await stack.stored() == (0, 0)
    stack.pipeline.replace_router(cast(Router, FixedRouter()))  # the budget turned over
    await stack.ask(chat("What is the meaning of life?", stream=stream))
    assert stack.upstream.calls == 3 and await stack.stored() == (1, 1)


async def test_uncacheable_patterns_keep_the_exact_cache_clean_with_the_semantic_cache_off(
    stack: Stack,
) -> None:
    stack.pipeline = Pipeline(replace(stack.pipeline._p, semantic=None))
    for _ in range(2):
        rec, _ = await stack.ask(chat("What is my balance?"))
        assert rec.cache is CacheOutcome.BYPASS and rec.extra["cache_checks"] == "uncacheable"
    await stack.ask(chat("Name a colour"))
    again, _ = await stack.ask(chat("Name a colour"))
    assert again.cache is CacheOutcome.EXACT
    assert stack.upstream.calls == 3 and stack.exact.entries == 1


async def test_a_stream_the_client_leaves_midway_is_billed_for_what_came(stack: Stack) -> None:
    def piece(text: str, finish: str | None = None) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}

    stack.upstream.chunks = [
        piece("one two three four "),
        piece("five six "),
        piece("seven", "stop"),
    ]
    rec = record()
    async with stack.pipeline.stream(chat("Count to seven", stream=True), rec) as events:
        async for _ in events:
            break  # the client hangs up after the first event
        assert rec.usage is None  # nothing billed while the stream is open
    assert rec.usage is not None and rec.usage.estimated
    assert rec.usage.completion_tokens > 0 and rec.cost_usd > 0
    assert rec.extra["stream_incomplete"] is True
    assert await stack.stored() == (0, 0)  # half an answer is never cached
