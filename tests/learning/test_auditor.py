"""The auditor's admission on injected clocks: the daily cap per tenant, the in-flight bound,
the sampling rate, the cache stream and its false-hit bound."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from hybrid_gateway.config import parse_config
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.learning.auditor import Auditor, AuditParts
from hybrid_gateway.learning.bound import FalseHitTracker, ScopeCounts
from hybrid_gateway.learning.judges import LaneAnswer, MarksJudge
from hybrid_gateway.learning.settings import AuditConfig
from hybrid_gateway.learning.spend import DAY_S, SpendCaps
from hybrid_gateway.learning.store import AuditRow
from hybrid_gateway.types import CacheOutcome, ChatRequest, RequestRecord, RouteDecision, Usage
from tests.test_config import minimal


class Lanes:
    """Every usage costs 0.1; answers carry the mark of ``texts[lane]``; ``gate`` holds them."""

    def __init__(self, texts: Mapping[str, str]) -> None:
        self.texts = texts
        self.asked: list[tuple[str, Mapping[str, Any]]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    def price(self, lane: str, usage: Usage) -> float:
        return 0.1

    async def ask(
        self, lane: str, body: Mapping[str, Any], record: RequestRecord | None = None
    ) -> LaneAnswer:
        self.asked.append((lane, body))
        await self.gate.wait()
        return LaneAnswer(self.texts[lane], 0.1)


class Sink:
    def __init__(self) -> None:
        self.rows: list[AuditRow] = []

    async def save(self, row: AuditRow) -> None:
        self.rows.append(row)

    async def aclose(self) -> None:
        pass


class Wall:
    def __init__(self) -> None:
        self.now = 100 * DAY_S

    def __call__(self) -> float:
        return self.now


def build(config: AuditConfig, lanes: Lanes, wall: Wall, **extra: Any) -> tuple[Auditor, Sink]:
    sink = Sink()
    caps = SpendCaps({kind: config.stream(kind).daily_usd_per_tenant
                      for kind in ("router", "cache", "near_miss")}, wall)  # fmt: skip
    parts = AuditParts(
        config=config, caller=lanes, judge=MarksJudge(), store=sink, caps=caps, wall=wall,
        rng=random.Random(7), busy=lambda lane: None, **extra,
    )  # fmt: skip
    return Auditor(parts), sink


MESSAGES = [{"role": "user", "content": "q"}]
REQUEST = ChatRequest("auto", MESSAGES, False, False, {"model": "auto", "messages": MESSAGES})
ANSWER = orjson.dumps({"choices": [{"message": {"content": "⟦g1|ok⟧ cached"}}]})


def light(n: int, tenant: str = "acme") -> RequestRecord:
    return RequestRecord(f"req_{tenant}_{n}", 0.0, tenant=tenant, usage=Usage(10, 20),
                         route=RouteDecision("light", "light-c", "default"))  # fmt: skip


def config(**streams: Any) -> AuditConfig:
    return AuditConfig.model_validate({"enabled": True, "max_in_flight": 100, **streams})


async def test_the_daily_cap_holds_on_the_injected_clock() -> None:
    wall = Wall()
    lanes = Lanes({"heavy": "⟦g1|ok⟧ h"})
    auditor, sink = build(config(router={"rate": 1.0, "daily_usd_per_tenant": 0.35}), lanes, wall)
    for n in range(10):
        auditor.submit(REQUEST, light(n), ANSWER)
    auditor.submit(REQUEST, light(0, "other"), ANSWER)  # another tenant has its own cap
    await auditor.drain()
    assert len([r for r in sink.rows if r.tenant == "acme"]) == 3  # 3 x 0.1 <= 0.35
    assert sum(r.cost_usd for r in sink.rows if r.tenant == "acme") <= 0.35
    assert len([r for r in sink.rows if r.tenant == "other"]) == 1
    wall.now += DAY_S / 2  # the same UTC day: still capped
    auditor.submit(REQUEST, light(20), ANSWER)
    await auditor.drain()
    assert len(sink.rows) == 4
    wall.now = 101 * DAY_S  # the next day
    auditor.submit(REQUEST, light(21), ANSWER)
    await auditor.drain()
    assert len(sink.rows) == 5


async def test_running_audits_are_bounded_and_the_extra_ones_dropped() -> None:
    lanes = Lanes({"heavy": "⟦g1|ok⟧ h"})
    lanes.gate.clear()  # the heavy lane stalls
    cfg = AuditConfig.model_validate(
        {"enabled": True, "max_in_flight": 2, "router": {"rate": 1.0, "daily_usd_per_tenant": 100}}
    )
    auditor, sink = build(cfg, lanes, Wall())
    for n in range(5):
        auditor.submit(REQUEST, light(n), ANSWER)
    assert auditor.in_flight == 2
    lanes.gate.set()
    await auditor.drain()
    assert len(sink.rows) == 2


async def test_the_sampling_rate() -> None:
    cfg = config(router={"rate": 0.2, "daily_usd_per_tenant": 1000}, max_in_flight=1000)
    auditor, sink = build(cfg, Lanes({"heavy": "⟦g1|ok⟧ h"}), Wall())
    for n in range(1000):
        auditor.submit(REQUEST, light(n), ANSWER)
    await auditor.drain()
    assert 150 <= len(sink.rows) <= 250


@pytest.mark.parametrize(
    ("record", "audited"),
    [(RequestRecord("r", 0.0, route=RouteDecision("heavy", "h", "default")), False),
     (RequestRecord("r", 0.0, route=RouteDecision("light", "l", "d", downgraded=True)), False),
     (RequestRecord("r", 0.0, route=RouteDecision("light", "l", "d"), fallback="timeout"), False),
     (RequestRecord("r", 0.0, route=RouteDecision("light", "l", "d"), cache=CacheOutcome.EXACT),
      False),
     (RequestRecord("r", 0.0, route=RouteDecision("light", "l", "d")), True)],
)  # fmt: skip
async def test_only_light_answers_and_semantic_hits_are_audited(
    record: RequestRecord, audited: bool
) -> None:
    auditor, sink = build(config(router={"rate": 1.0}, cache={"rate": 1.0}),
                          Lanes({"heavy": "⟦g1|ok⟧ h"}), Wall())  # fmt: skip
    auditor.submit(REQUEST, record, ANSWER)
    await auditor.drain()
    assert len(sink.rows) == int(audited)


async def test_cache_hits_are_answered_fresh_by_the_routed_lane_and_bound() -> None:
    bounds: dict[str, float] = {}

    def report(scope: str, counts: ScopeCounts) -> None:
        bounds[scope] = counts.bound

    lanes = Lanes({"heavy": "⟦g1|ok⟧ fresh", "light": "⟦g1|ok⟧ fresh"})
    tracker = FalseHitTracker(report)
    auditor, sink = build(config(cache={"rate": 1.0, "daily_usd_per_tenant": 100}), lanes,
                          Wall(), listeners=(tracker,))  # fmt: skip
    for n, cached in enumerate(["⟦g1|ok⟧ c", "⟦g9|ok⟧ another question's answer"] * 10):
        hit = RequestRecord(f"hit{n}", 0.0, tenant="acme", cache=CacheOutcome.SEMANTIC,
                            similarity=0.93, usage=Usage(10, 20),
                            route=RouteDecision("light", "light-c", "default"))  # fmt: skip
        auditor.submit(REQUEST, hit, orjson.dumps({"choices": [{"message": {"content": cached}}]}))
    await auditor.drain()
    assert {lane for lane, _ in lanes.asked} == {"light"}
    assert [r.verdict for r in sink.rows].count("a_worse") == 10
    assert all(r.scope == "tenant:acme" and r.similarity == 0.93 for r in sink.rows)
    counts = tracker.scopes["tenant:acme"]
    assert (counts.audits, counts.false_hits) == (20, 10)
    assert bounds["tenant:acme"] == pytest.approx(counts.bound) and counts.bound > 0.5


@pytest.mark.parametrize(("mode", "stored"), [("full", "Q stored"), ("none", None)])
async def test_a_cache_audit_keeps_the_cached_question_as_prompts_allow(
    mode: str, stored: str | None
) -> None:
    async def entry(entry: int) -> tuple[str, bytes] | None:
        return ("Q stored", ANSWER) if entry == 42 else None

    lanes = Lanes({"light": "⟦g1|ok⟧ fresh"})
    auditor, sink = build(config(cache={"rate": 1.0, "daily_usd_per_tenant": 100}), lanes,
                          Wall(), cached_entry=entry, prompts=mode)  # fmt: skip
    hit = RequestRecord("hit", 0.0, tenant="acme", cache=CacheOutcome.SEMANTIC, similarity=0.9,
                        usage=Usage(10, 20), route=RouteDecision("light", "light-c", "default"),
                        extra={"cache_entry": 42})  # fmt: skip
    auditor.submit(REQUEST, hit, ANSWER)
    await auditor.drain()
    assert sink.rows[0].cached_prompt == stored
    assert sink.rows[0].prompt == ("q" if mode == "full" else None)


# -- near misses ---------------------------------------------------------------------------------
ENTRIES = {  # entry id -> (stored question, its answer): 1 answers g1 (right), 2 another group
    1: ("q?", orjson.dumps({"choices": [{"message": {"content": "⟦g1|ok⟧ stored"}}]})),
    2: ("q!", orjson.dumps({"choices": [{"message": {"content": "⟦g9|ok⟧ stored"}}]})),
}


async def stored(entry: int) -> tuple[str, bytes] | None:
    return ENTRIES.get(entry)


def near(n: int, entry: int | None, similarity: float | None) -> RequestRecord:
    extra: dict[str, object] = {} if entry is None else {"cache_near": entry}
    return RequestRecord(f"near_{n}", 0.0, tenant="acme", usage=Usage(10, 20),
                         similarity=similarity, extra=extra,
                         route=RouteDecision("light", "light-c", "default"))  # fmt: skip


async def test_a_near_miss_is_judged_against_the_entry_without_a_shadow_request() -> None:
    lanes = Lanes({"heavy": "⟦g1|ok⟧ h"})
    reads: list[int] = []

    async def counted(entry: int) -> tuple[str, bytes] | None:
        reads.append(entry)
        return await stored(entry)

    auditor, sink = build(config(near_miss={"rate": 1.0, "margin": 0.05}), lanes, Wall(),
                          cached_entry=counted, cache_threshold=lambda: 0.95,
                          prompts="full")  # fmt: skip
    auditor.submit(REQUEST, near(1, 1, 0.93), ANSWER)  # the entry answers the same group
    auditor.submit(REQUEST, near(2, 2, 0.92), ANSWER)  # the entry answers another question
    auditor.submit(REQUEST, near(3, 1, 0.89), ANSWER)  # under the margin: not audited
    auditor.submit(REQUEST, near(4, None, 0.94), ANSWER)  # no candidate kept: not audited
    auditor.submit(REQUEST, near(5, 7, 0.94), ANSWER)  # evicted meanwhile: no verdict
    await auditor.drain()
    assert lanes.asked == []  # no upstream call: B is the client's own answer
    rows = {r.request_id: r for r in sink.rows}
    assert set(rows) == {"near_1", "near_2", "near_5"}
    assert (rows["near_1"].kind, rows["near_1"].verdict) == ("near_miss", "equivalent")
    assert rows["near_2"].verdict == "a_worse" and rows["near_2"].similarity == 0.92
    assert (rows["near_5"].verdict, rows["near_5"].error) == (None, "entry_gone")
    assert rows["near_2"].cached_prompt == "q!" and rows["near_2"].scope == "tenant:acme"
    assert rows["near_1"].lane_a is None and rows["near_1"].lane_b == "light"
    assert all(r.cost_usd == 0.0 for r in sink.rows)
    assert sorted(reads) == [1, 2, 7, 7]  # read once for judge and row (7: gone, read again)


async def test_an_unsampled_near_miss_can_still_be_a_router_audit() -> None:
    lanes = Lanes({"heavy": "⟦g1|ok⟧ h"})
    streams = {"near_miss": {"rate": 0.0}, "router": {"rate": 1.0, "daily_usd_per_tenant": 9}}
    auditor, sink = build(config(**streams), lanes, Wall(), cached_entry=stored,
                          cache_threshold=lambda: 0.95)  # fmt: skip
    auditor.submit(REQUEST, near(1, 1, 0.93), ANSWER)
    await auditor.drain()
    assert [(r.kind, r.lane_b) for r in sink.rows] == [("router", "heavy")]


def test_the_feedback_judge_cannot_audit_near_misses() -> None:
    audit = {"enabled": True, "near_miss": {"rate": 0.1}, "judge": {"kind": "feedback"}}
    with pytest.raises(ConfigError) as refused:
        parse_config(minimal(learning={"audit": audit}), "gw.yaml")
    assert "learning.audit.near_miss.rate: 0 with the feedback judge" in str(refused.value)


async def test_near_misses_are_sampled_once_at_their_rate() -> None:
    auditor, sink = build(config(near_miss={"rate": 0.5, "margin": 0.05}, max_in_flight=4000),
                          Lanes({}), Wall(),
                          cached_entry=stored, cache_threshold=lambda: 0.95)  # fmt: skip
    for n in range(2000):
        auditor.submit(REQUEST, near(n, 1, 0.93), ANSWER)
    await auditor.drain()
    assert 900 <= len(sink.rows) <= 1100  # 0.5, not 0.25
