"""The latency floor: each answer alone at the emulator's step times, as routed and as an oracle
would route; hand-made items, results and engines."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hybrid_gateway.tools.bench.floor import alone_s, latency_floor
from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.workload.schema import Labels, WorkloadItem

LIGHT = {"decode_step_ms": 3.0, "per_seq_step_ms": 0.0, "per_kilotoken_step_ms": 0.0,
         "prefill_tps": 1e12}  # fmt: skip
HEAVY = {"decode_step_ms": 12.0, "per_seq_step_ms": 0.0, "per_kilotoken_step_ms": 0.0,
         "prefill_tps": 1e12}  # fmt: skip


def item(key: str, text: str, tokens: int, light_ok: bool) -> WorkloadItem:
    labels = Labels(light_ok=light_ok, heavy_ok=True, complexity="simple" if light_ok else
                    "complex", category="c", source="s", group=key, lang="en",
                    outcome="assumed")  # fmt: skip
    return WorkloadItem(key, 0.0, "t", ({"role": "user", "content": text},), 1000, tokens,
                        False, labels)  # fmt: skip


def result(key: str, start: float, lane: str | None, cache: str | None = None) -> RequestResult:
    return RequestResult(key, start, 1.0, None, 200, None, False, lane, None, None, cache, None,
                         None, None)  # fmt: skip


def test_alone_follows_the_engine_model() -> None:
    engine = {"decode_step_ms": 10.0, "per_seq_step_ms": 1.0, "per_kilotoken_step_ms": 2.0,
              "prefill_tps": 1000.0}  # fmt: skip
    # 100 prompt tokens, 4 output tokens: 4 x 11 ms + 2 ms x (4 x 100 + 10) / 1000 + 0.1 s
    assert alone_s(engine, 100, 4) == pytest.approx(0.044 + 0.00082 + 0.1)


def test_routed_and_oracle_p95() -> None:
    items = {
        "a": item("a", "easy one", 100, True),  # light: 0.3 s
        "b": item("b", "hard one", 100, False),  # an oracle sends it heavy: 1.2 s
        "a2": item("a2", "easy one", 100, True),  # the same question again: an exact hit
    }
    engines = {"light": LIGHT, "heavy": HEAVY}
    results = [result("a", 0.0, "light"), result("b", 1.0, "light"),
               result("a2", 2.0, "light", cache="exact")]  # fmt: skip
    floor = latency_floor(results, items, engines)
    # as routed: 0.3, 0.3 (b went light), 0 (hit); the oracle: 0.3, 1.2, 0
    assert floor["routed_p95_s"] == pytest.approx(0.3)
    assert floor["oracle_p95_s"] == pytest.approx(0.3 + 0.9 * 0.9, abs=1e-3)
    # an error with no route is left out of the routed floor, not taken for 0 s
    floor = latency_floor([*results, result("b", 3.0, None)], items, engines)
    assert floor["routed_p95_s"] == pytest.approx(0.3)
    # an item the workload does not hold: no floor
    assert latency_floor([result("zz", 0.0, "light")], items, engines) == {
        "routed_p95_s": None, "oracle_p95_s": None, "ideal_p95_s": None,
        "by_class": {}}  # fmt: skip


def test_floors_per_complexity_class() -> None:
    items = {
        "a": item("a", "easy one", 100, True),  # simple, light: 0.3 s
        "b": item("b", "hard one", 100, False),  # complex: heavy 1.2 s for an oracle
        "c": item("c", "easy two", 200, True),  # simple, light: 0.6 s
    }
    engines = {"light": LIGHT, "heavy": HEAVY}
    results = [result("a", 0.0, "light"), result("b", 1.0, "light"),
               result("c", 2.0, "light", cache="semantic")]  # fmt: skip
    by_class = latency_floor(results, items, engines)["by_class"]
    assert set(by_class) == {"simple", "complex"}
    # complex: b went light (0.3 s as routed), an oracle sends it heavy (1.2 s)
    assert by_class["complex"]["routed_p95_s"] == pytest.approx(0.3)
    assert by_class["complex"]["oracle_p95_s"] == pytest.approx(1.2)
    # simple: a at 0.3 s and c a cache hit as routed; an oracle answers c fresh (0.6 s)
    assert by_class["simple"]["routed_p95_s"] == pytest.approx(0.3 * 0.95)
    assert by_class["simple"]["oracle_p95_s"] == pytest.approx(0.3 + 0.95 * 0.3)


def test_the_ideal_floor_serves_paraphrases_too() -> None:
    items = {
        "a": item("a", "easy one", 100, True),  # 0.3 s
        "b": item("b", "hard one", 100, False),  # heavy for an oracle: 1.2 s
        "b2": item("b2", "the hard one, again in other words", 100, False),
    }
    items["b2"] = replace(items["b2"], labels=replace(items["b2"].labels, group="b"))
    engines = {"light": LIGHT, "heavy": HEAVY}
    results = [result("a", 0.0, "light"), result("b", 1.0, "heavy"), result("b2", 2.0, "heavy")]
    floor = latency_floor(results, items, engines)
    # an exact cache cannot serve b2 (another text): 0.3, 1.2, 1.2
    assert floor["oracle_p95_s"] == pytest.approx(1.2)
    # a cache serving paraphrases serves it: 0.3, 1.2, 0
    assert floor["ideal_p95_s"] == pytest.approx(0.3 + 0.9 * 0.9, abs=1e-3)
    assert floor["by_class"]["complex"]["ideal_p95_s"] == pytest.approx(1.2 * 0.95, abs=1e-3)
    # b asked in the warm-up: b again is served by both caches (0 s), its paraphrase b2 by the
    # ideal one only (1.2 s for the oracle): oracle 0, 1.2; ideal 0, 0
    before = latency_floor(results[1:], items, engines, {"b"})
    assert before["oracle_p95_s"] == pytest.approx(0.95 * 1.2, abs=1e-3)
    assert before["ideal_p95_s"] == 0.0
