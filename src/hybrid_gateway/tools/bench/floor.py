"""The latency no server could beat: each answer of a stage generated alone, at its step times.

A goal's p95 can be out of any gateway's reach: the answers are as long as they are, and a model
server decodes them one step per token.  For a stage's requests and the workload's items this
module gives three p95s with no queue and no batch (each request alone on its server):

- ``routed``: each answer on the lane that gave it; a cache hit at 0 s;
- ``oracle``: each answer on the lane a perfect router would pick from the labels (heavy only
  where the light model's answer is not good enough and the heavy one's is), an exact repeat of
  a question asked before (earlier in the stage, its warm-up or an earlier stage) at 0 s (what
  an exact cache serves);
- ``ideal``: as ``oracle``, and a paraphrase of a question asked before (its paraphrase group
  asked before in other words) at 0 s too: what a semantic cache that served every
  paraphrase, and nothing else, would add.

All three are also given per complexity class (``by_class``: the items labelled simple and
complex), for the Project X table's simple and complex p95 lines.

A request alone takes ``prompt_tokens / prefill_tps`` plus N decode steps of ``decode_step_ms +
per_seq_step_ms + per_kilotoken_step_ms * context / 1000`` (``emulator/engine.py``, batch 1), N
= min(expected_output_tokens, max_tokens).  The measured p95 minus ``routed`` is queueing,
batching and the gateway; ``routed`` minus ``oracle`` is what the routing and caching chose;
``oracle`` minus ``ideal`` is what the paraphrases a semantic cache did not serve could give.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

from hybrid_gateway.accounting.tokens import count_tokens
from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.bench.stats import is_cache_hit, percentile
from hybrid_gateway.tools.workload.schema import WorkloadItem, question

__all__ = ["Asked", "alone_s", "asked_in_order", "engines_of", "latency_floor"]

LIGHT, HEAVY = "light", "heavy"
ROUTED, ORACLE, IDEAL = "routed", "oracle", "ideal"  # the floors, named as above


def alone_s(engine: Mapping[str, Any], prompt_tokens: int, output_tokens: int) -> float:
    """Seconds one request takes alone on a server with ``engine``'s settings (see above)."""
    n, p = output_tokens, prompt_tokens
    step_ms = float(engine["decode_step_ms"]) + float(engine["per_seq_step_ms"])
    context_ms = float(engine["per_kilotoken_step_ms"]) * (n * p + n * (n + 1) / 2) / 1000.0
    return (n * step_ms + context_ms) / 1000.0 + p / float(engine["prefill_tps"])


class Asked(NamedTuple):
    """A request of the stage with its item, and whether its question was asked before."""

    result: RequestResult
    item: WorkloadItem
    verbatim: bool  # the same text was asked before (what an exact cache can serve)
    repeat: bool  # verbatim, or its paraphrase group was asked before in other words


def asked_in_order(
    results: Sequence[RequestResult],
    items: Mapping[str, WorkloadItem],
    sent_before: Collection[str] = (),
) -> list[Asked] | None:
    """``results`` in send order, each with whether its question was asked before: earlier in
    the stage, or by an item of ``sent_before`` (the stage's warm-up, earlier stages); None when
    a request's item is not in ``items``."""
    earlier = [items[key] for key in sent_before if key in items]
    texts: set[str] = {question(item) for item in earlier}
    groups: set[str] = {item.labels.group for item in earlier}
    asked = []
    for result in sorted(results, key=lambda r: r.start_s):
        item = items.get(result.item)
        if item is None:
            return None
        text, group = question(item), item.labels.group
        verbatim = text in texts
        asked.append(Asked(result, item, verbatim, verbatim or group in groups))
        texts.add(text)
        groups.add(group)
    return asked


def latency_floor(
    results: Sequence[RequestResult],
    items: Mapping[str, WorkloadItem],
    engines: Mapping[str, Mapping[str, Any]],
    sent_before: Collection[str] = (),
) -> dict[str, Any]:
    """``routed_p95_s``, ``oracle_p95_s`` and ``ideal_p95_s`` of ``results`` (a stage's), and
    the same per complexity class under ``by_class``; all None (``by_class`` empty) when a
    request's item is not in ``items``.  The items of ``sent_before`` (the stage's warm-up,
    earlier stages) count as asked before the stage, for the oracle's and the ideal's caches."""
    floors: dict[str, dict[str, list[float]]] = {ROUTED: {}, ORACLE: {}, IDEAL: {}}
    asked = asked_in_order(results, items, sent_before)
    if asked is None:
        return {f"{name}_p95_s": None for name in floors} | {"by_class": {}}
    for result, item, verbatim, repeat in asked:
        prompt = sum(count_tokens(str(m.get("content") or "")) for m in item.messages)
        tokens = min(item.expected_output_tokens, item.max_tokens)
        labels = item.labels
        best = HEAVY if (not labels.light_ok and labels.heavy_ok) else LIGHT
        kind = labels.complexity
        fresh = alone_s(engines[best], prompt, tokens)
        floors[ORACLE].setdefault(kind, []).append(0.0 if verbatim else fresh)
        floors[IDEAL].setdefault(kind, []).append(0.0 if repeat else fresh)
        if is_cache_hit(result):
            floors[ROUTED].setdefault(kind, []).append(0.0)
        elif result.lane is not None and result.lane in engines:  # no route: left out
            answer_s = alone_s(engines[result.lane], prompt, tokens)
            floors[ROUTED].setdefault(kind, []).append(answer_s)
    kinds = sorted(floors[ORACLE])
    return {
        **{
            f"{name}_p95_s": _p95([s for v in by.values() for s in v])
            for name, by in floors.items()
        },
        "by_class": {
            kind: {f"{name}_p95_s": _p95(by.get(kind, [])) for name, by in floors.items()}
            for kind in kinds
        },
    }


def _p95(values: Sequence[float]) -> float | None:
    return _s(percentile(values, 95))


def engines_of(emulators: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Each lane's engine settings (the emulator profile's), or None without both lanes'."""
    engines = {}
    for lane in ("light", "heavy"):
        facts = (emulators or {}).get(lane)
        profile = facts.get("profile") if isinstance(facts, dict) else None
        engine = profile.get("engine") if isinstance(profile, dict) else None
        if not isinstance(engine, dict):
            return None
        engines[lane] = engine
    return engines


def _s(ms_or_s: float | None) -> float | None:
    return None if ms_or_s is None else round(ms_or_s, 3)
