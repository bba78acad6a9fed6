"""Shadow requests in the background: audit a sampled share of the gateway's decisions.

The pipeline hands every settled answer to ``Auditor.submit`` (a few dictionary look-ups, no
await).  A sampled light-lane answer is sent again to the heavy lane (stream ``router``); a
sampled semantic-cache hit is answered fresh by the routed lane (stream ``cache``).  A sampled
near miss (a miss whose nearest entry only the threshold refused, at most ``near_miss.margin``
under it; stream ``near_miss``) needs no second answer: the entry's answer, what a lower
threshold would have served, is judged against the fresh one the client got.  The two
answers go to the judge and the verdict to the store.  All of that runs in a task of its own:
the client's answer is already settled and is never waited for, changed or told about it.

An audit is skipped, never queued: when the tenant is excluded, when the lane it needs is busy
or shedding is on (``load.py``), when ``max_in_flight`` audits are running, or when its
estimated cost does not fit the tenant's daily cap (``spend.py``).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from hybrid_gateway.accounting.tokens import count_tokens
from hybrid_gateway.cache.semantic.stage import NEAR_MISS as NEAR_ENTRY
from hybrid_gateway.learning.judges import Judge, Judgement, JudgeRefused, LaneAnswer
from hybrid_gateway.learning.lanecall import answer_text_of
from hybrid_gateway.learning.load import LoadProbe
from hybrid_gateway.learning.metrics import AuditMetrics
from hybrid_gateway.learning.settings import AuditConfig
from hybrid_gateway.learning.spend import Reservation, SpendCaps
from hybrid_gateway.learning.store import AuditRow
from hybrid_gateway.observability.prompts import PromptMode, last_user_text, stored_prompt
from hybrid_gateway.types import CacheOutcome, ChatRequest, RequestRecord, Usage

__all__ = ["AuditParts", "Auditor", "VerdictListener", "VerdictSink"]

log = logging.getLogger("hybrid_gateway.learning")

ROUTER, CACHE, NEAR_MISS = "router", "cache", "near_miss"
_JUDGE_PROMPT_TOKENS = 120  # the rubric and its framing, over the question and both answers


class VerdictSink(Protocol):
    async def save(self, row: AuditRow) -> None: ...

    async def aclose(self) -> None: ...


class Lanes(Protocol):
    """``lanecall.LaneCaller``: a lane's answer, and what a usage costs there."""

    def price(self, lane: str, usage: Usage) -> float: ...

    async def ask(
        self, lane: str, body: Mapping[str, Any], record: RequestRecord | None = None
    ) -> LaneAnswer: ...


class VerdictListener(Protocol):
    def verdict(self, row: AuditRow) -> None: ...


@dataclass(frozen=True, slots=True)
class AuditParts:
    config: AuditConfig
    caller: Lanes
    judge: Judge
    store: VerdictSink
    caps: SpendCaps
    wall: Callable[[], float]
    rng: random.Random
    busy: LoadProbe
    prompts: PromptMode = "none"
    metrics: AuditMetrics | None = None
    scope: Callable[[str], str] = lambda tenant: f"tenant:{tenant}"
    listeners: Sequence[VerdictListener] = field(default_factory=tuple)
    # cache and near-miss audits: a semantic-cache entry's stored question and answer body
    # (None: evicted, or no semantic cache)
    cached_entry: Callable[[int], Awaitable[tuple[str, bytes] | None]] | None = None
    # near-miss audits: the semantic cache's hit threshold now
    cache_threshold: Callable[[], float] | None = None


@dataclass(frozen=True, slots=True)
class _Audit:
    kind: str
    lane_b: str
    question: str
    # the client's answer body, read in the task (off the request's path); for a near miss
    # it is answer B, and A is the entry's
    answer: bytes
    body_b: Mapping[str, Any]
    reservation: Reservation


class Auditor:
    def __init__(self, parts: AuditParts) -> None:
        self._p = parts
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def submit(self, request: ChatRequest, record: RequestRecord, body: bytes) -> None:
        """Maybe start an audit of this settled answer; returns at once."""
        kind = self._kind(record)
        config = self._p.config
        if kind is None or record.tenant in config.exclude_tenants:
            return
        if not self._sampled(kind):
            if kind != NEAR_MISS or not self._light(record):
                return
            kind = ROUTER  # a near miss not sampled is a fresh light answer too
            if not self._sampled(kind):
                return
        audit = self._plan(kind, request, record, body)
        if audit is not None:
            task = asyncio.create_task(self._run(audit, request, record))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for the audits running now (tests, and a graceful stop)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        """Stop the audits still running (their spend is settled as far as it got)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._p.store.aclose()

    def _sampled(self, kind: str) -> bool:
        rate = self._p.config.stream(kind).rate
        return rate > 0 and self._p.rng.random() < rate

    def _kind(self, record: RequestRecord) -> str | None:
        route = record.route
        if route is None or record.status != 200 or record.fallback is not None:
            return None
        if record.cache is CacheOutcome.SEMANTIC:
            return CACHE
        if record.cache is CacheOutcome.MISS and self._near(record):
            return NEAR_MISS
        fresh = record.cache in (CacheOutcome.MISS, CacheOutcome.BYPASS)
        return ROUTER if fresh and self._light(record) else None

    def _light(self, record: RequestRecord) -> bool:
        route = record.route
        lanes = self._p.config.light_lanes
        return route is not None and not route.downgraded and route.lane in lanes

    def _near(self, record: RequestRecord) -> bool:
        """A miss whose nearest entry only the threshold refused, within the margin."""
        threshold = self._p.cache_threshold
        if threshold is None or not isinstance(record.extra.get(NEAR_ENTRY), int):
            return False
        similarity = record.similarity
        margin = self._p.config.near_miss.margin
        return similarity is not None and similarity >= threshold() - margin

    def _plan(
        self, kind: str, request: ChatRequest, record: RequestRecord, body: bytes
    ) -> _Audit | None:
        assert record.route is not None  # _kind checked it
        config, judge = self._p.config, self._p.judge
        lane_b = config.heavy_lane if kind == ROUTER else record.route.lane
        shadow = judge.needs_answer_b and kind != NEAR_MISS  # a near miss's B is the client's
        needed = [lane_b] if shadow else []
        if config.judge.kind == "llm" and config.judge.lane is not None:
            needed.append(config.judge.lane)
        reason = next((why for lane in needed if (why := self._p.busy(lane)) is not None), None)
        if reason is None and len(self._tasks) >= config.max_in_flight:
            reason = "in_flight"
        usage = record.usage or Usage(
            count_tokens(_question(request)), count_tokens(answer_text(body))
        )
        out_cap = _out_cap(request, usage)
        estimate = self._estimate(lane_b if shadow else None, usage, out_cap)
        reservation = None
        if reason is None:
            reservation = self._p.caps.reserve(kind, record.tenant, estimate)
            reason = "cap" if reservation is None else None
        if reason is not None or reservation is None:
            if self._p.metrics is not None:
                self._p.metrics.skip(kind, reason or "cap")
            return None
        return _Audit(kind, lane_b, _question(request), body,
                      shadow_body(request.body, out_cap), reservation)  # fmt: skip

    def _estimate(self, lane_b: str | None, usage: Usage, out_cap: int) -> float:
        """The shadow answer on ``lane_b`` (None: no shadow request), then the llm judge."""
        if lane_b is None and not self._p.judge.needs_answer_b:
            return 0.0  # the feedback judge: nothing is asked
        cost = 0.0
        if lane_b is not None:
            cost = self._lane_price(lane_b, Usage(usage.prompt_tokens, out_cap))
        judge = self._p.config.judge
        if judge.kind == "llm" and judge.lane is not None:
            prompt = usage.prompt_tokens + usage.completion_tokens + out_cap + _JUDGE_PROMPT_TOKENS
            cost += self._lane_price(judge.lane, Usage(prompt, judge.max_tokens))
        return cost

    def _lane_price(self, lane: str, usage: Usage) -> float:
        return self._p.caller.price(lane, usage)

    async def _run(self, audit: _Audit, request: ChatRequest, record: RequestRecord) -> None:
        await asyncio.sleep(0)  # the client's answer goes out first
        cost, verdict, error = 0.0, None, None
        judge = self._p.judge
        entry = None  # a near miss's entry, read once for the judge and the row
        try:
            judgement = Judgement(None)
            if audit.kind == NEAR_MISS:
                entry = await self._entry(record, record.extra.get(NEAR_ENTRY))
                if entry is None:
                    error = "entry_gone"
                else:
                    answer_b = answer_text(audit.answer)
                    judgement = await judge.compare(audit.question, answer_text(entry[1]),
                                                    answer_b)  # fmt: skip
            elif judge.needs_answer_b:
                try:
                    shadow = await self._p.caller.ask(audit.lane_b, audit.body_b, record)
                except Exception as exc:  # any failure: no verdict, nothing else
                    error = "shadow_failed"
                    log.info("audit of %s: shadow request failed: %r", record.request_id, exc)
                else:
                    cost += shadow.cost_usd
                    answer_a = answer_text(audit.answer)
                    judgement = await judge.compare(audit.question, answer_a, shadow.text)
            cost += judgement.cost_usd
            verdict = judgement.verdict
        except JudgeRefused as exc:
            cost += exc.cost_usd
            error = "judge_refused"
        except Exception as exc:
            error = "judge_failed"
            log.info("audit of %s: judge failed: %r", record.request_id, exc)
        finally:
            self._p.caps.settle(audit.reservation, cost)
        await self._record(audit, request, record, verdict.value if verdict else None, error,
                           cost, entry)  # fmt: skip

    async def _entry(self, record: RequestRecord, entry_id: object) -> tuple[str, bytes] | None:
        """A semantic-cache entry's question and answer body (None: evicted, unreadable)."""
        if self._p.cached_entry is None or not isinstance(entry_id, int):
            return None
        try:
            return await self._p.cached_entry(entry_id)
        except Exception as exc:  # the entry's store is down: no entry
            log.info("audit of %s: cache entry unreadable: %r", record.request_id, exc)
            return None

    async def _cached_prompt(
        self, record: RequestRecord, kind: str, entry: tuple[str, bytes] | None
    ) -> str | None:
        """The entry's question (the served one, or a near miss's: ``entry`` when already
        read), as ``server.request_log.prompts`` keeps a prompt."""
        if self._p.prompts == "none":
            return None
        if entry is None:
            key = NEAR_ENTRY if kind == NEAR_MISS else "cache_entry"
            entry = await self._entry(record, record.extra.get(key))
        if entry is None:
            return None
        return stored_prompt(self._p.prompts, [{"role": "user", "content": entry[0]}])

    async def _record(
        self,
        audit: _Audit,
        request: ChatRequest,
        record: RequestRecord,
        verdict: str | None,
        error: str | None,
        cost: float,
        entry: tuple[str, bytes] | None = None,
    ) -> None:
        route = record.route
        cached = audit.kind in (CACHE, NEAR_MISS)
        row = AuditRow(
            request_id=record.request_id, ts=self._p.wall(), tenant=record.tenant,
            kind=audit.kind, judge=self._p.judge.name, rubric=self._p.judge.rubric,
            verdict=verdict, error=error,
            lane_a=None if cached or route is None else route.lane, lane_b=audit.lane_b,
            similarity=record.similarity if cached else None,
            scope=self._p.scope(record.tenant) if cached else None, cost_usd=cost,
            prompt=stored_prompt(self._p.prompts, request.messages),
            cached_prompt=(await self._cached_prompt(record, audit.kind, entry)
                           if cached else None),
        )  # fmt: skip
        outcome = verdict or error or "pending"
        if self._p.metrics is not None:
            self._p.metrics.finished(audit.kind, outcome, cost)
        for listener in self._p.listeners:
            listener.verdict(row)
        try:
            await self._p.store.save(row)
        except Exception as exc:  # a lost sample; the store reports its health
            log.warning("audit verdict of %s not stored: %r", record.request_id, exc)


def _question(request: ChatRequest) -> str:
    return last_user_text(request.messages) or ""


def _out_cap(request: ChatRequest, usage: Usage) -> int:
    """The shadow answer's max_tokens: twice the client's answer and some, within what it asked."""
    cap = 2 * usage.completion_tokens + 16
    for name in ("max_completion_tokens", "max_tokens"):
        asked = request.body.get(name)
        if isinstance(asked, int) and asked > 0:
            cap = min(cap, asked)
    return cap


def shadow_body(body: Mapping[str, Any], max_tokens: int) -> dict[str, Any]:
    """The client's request as one non-streamed answer of at most ``max_tokens`` tokens."""
    out = {k: v for k, v in body.items() if k not in _NOT_SHADOWED}
    out["max_tokens"] = max_tokens
    return out


_NOT_SHADOWED = frozenset({"stream", "stream_options", "n", "max_completion_tokens", "user"})


def answer_text(body: bytes) -> str:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    return answer_text_of(parsed) if isinstance(parsed, dict) else ""
