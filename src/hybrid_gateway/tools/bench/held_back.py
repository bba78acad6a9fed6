"""What holds each missed line of a goal back, and by how much, read off the same run.

Issue 21: "if a goal is missed, the report says which part holds it back (the ablation rows show
it) and by how much."  For the goal strategy at the goal stage, every line that fails (issue
21's goal, then the Project X table's lines not already in it) gets:

- ``short_by``: how far the figure is from its bound, in the line's unit (seconds, or a fraction
  for a percentage: 0.012 is 1.2 points);
- ``ablations``: each ``full-no-*`` row of the same stage: its figure for the line, the change
  against the goal strategy's, and whether it passes.  A part whose removal meets the line holds
  the line back; a part whose removal moves the figure away from its bound helps it;
- ``floor`` (a p95 line): the p95 with every answer generated alone (floor.py), as this strategy
  routed and cached, with a perfect router and an exact cache, and with a perfect router and a
  cache that serves every repeat, paraphrases too.  A bound below the perfect router's floor is
  out of any router's reach on these answers;
- ``ceiling`` (the cache hit rate): the share of the stage's requests that repeat a question
  the gateway was asked before (earlier in the stage, in its warm-up or an earlier stage),
  verbatim (what an exact cache can serve) or as a paraphrase (what a semantic cache can at
  best serve): no cache serves more than their sum from this traffic;
- ``reading``: the sentences the Markdown prints, made from the figures above only.

Pure functions over the report's JSON rows (``report.build_report``) and, for the ceiling, the
stage's results and the workload's items; no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from hybrid_gateway.tools.bench.floor import asked_in_order
from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.bench.verdict import (
    ISSUE_GOALS,
    PROJECT_X,
    Target,
    figures_of,
    round_figure,
    show,
)
from hybrid_gateway.tools.workload.schema import WorkloadItem

__all__ = ["PARTS", "held_back", "repeat_ceiling"]

JsonDict = dict[str, Any]

# The ablation strategies (strategies.py) and the part each one removes.
PARTS: Mapping[str, str] = {
    "full-no-classifier": "the classifier",
    "full-no-semantic": "the semantic cache",
    "full-no-degrade": "degradation (retries, breakers + backup, deadline fallback, shedding)",
}
# The p95 lines and the latency floor's class each one reads (None: every request).
_FLOOR_CLASS: Mapping[str, str | None] = {
    "p95_s": None,
    "simple_p95_s": "simple",
    "complex_p95_s": "complex",
}


def repeat_ceiling(
    results: Sequence[RequestResult],
    items: Mapping[str, WorkloadItem],
    sent_before: Collection[str] = (),
) -> JsonDict | None:
    """Shares of the stage's requests whose question the gateway was asked before (earlier in
    the stage, or by an item of ``sent_before``: its warm-up, earlier stages): the same text
    (``verbatim``) or another text of its paraphrase group (``paraphrase``); None when a
    request's item is not in ``items`` or the stage is empty."""
    asked = asked_in_order(results, items, sent_before)
    if not asked:
        return None
    n = len(asked)
    verbatim = sum(a.verbatim for a in asked)
    repeats = sum(a.repeat for a in asked)
    return {
        "verbatim": round(verbatim / n, 4),
        "paraphrase": round((repeats - verbatim) / n, 4),
        "any": round(repeats / n, 4),
    }


def held_back(results: Sequence[JsonDict], goal_row: JsonDict) -> list[JsonDict]:
    """One entry per failed line of ``goal_row`` (issue 21's goal, then the Project X lines not
    already judged there), each with the ablations of the same stage, the floor or ceiling where
    one applies, and its reading."""
    ablations = [
        r for r in results
        if r["stage"] == goal_row["stage"] and r["strategy"] in PARTS and r.get("requests")
    ]  # fmt: skip
    figures = figures_of(goal_row)
    entries: list[JsonDict] = []
    seen: set[str] = set()
    for target in (*ISSUE_GOALS, *PROJECT_X):
        if target.key in seen or target.bound is None:
            continue
        seen.add(target.key)
        value = target.value_of(figures)
        if value is None or target.judge(value) is not False:
            continue
        entries.append(_entry(target, value, goal_row, ablations))
    return entries


def _entry(
    target: Target, value: float, row: JsonDict, ablation_rows: Sequence[JsonDict]
) -> JsonDict:
    ablations = []
    for other in ablation_rows:
        theirs = target.value_of(figures_of(other))
        ablations.append({
            "strategy": other["strategy"],
            "part": PARTS[other["strategy"]],
            "value": round_figure(theirs),
            "change": None if theirs is None else round_figure(theirs - value),
            "pass": target.judge(theirs),
        })  # fmt: skip
    entry: JsonDict = {
        "key": target.key,
        "label": target.label,
        "value": round_figure(value),
        "target": target.target_text(),
        "short_by": round_figure(_gap(target, value)),
        "ablations": ablations,
    }
    if target.key in _FLOOR_CLASS:
        entry["floor"] = _floor(row.get("latency_floor"), _FLOOR_CLASS[target.key])
    if target.key == "cache_hit_rate":
        figures = figures_of(row)
        entry["ceiling"] = row.get("repeat_ceiling")
        entry["hits"] = {
            "exact": round_figure(figures.exact_hit_rate),
            "semantic": round_figure(figures.semantic_hit_rate),
        }
    entry["reading"] = _reading(target, entry)
    return entry


def _gap(target: Target, value: float) -> float:
    """How far ``value`` must move to reach the bound: positive, in the line's unit."""
    assert target.bound is not None
    return value - target.bound if target.op in ("<", "<=") else target.bound - value


def _floor(floor: JsonDict | None, kind: str | None) -> JsonDict | None:
    if not floor:
        return None
    picked = floor if kind is None else (floor.get("by_class") or {}).get(kind)
    if not picked or picked.get("oracle_p95_s") is None:
        return None
    return {key: picked.get(key) for key in ("routed_p95_s", "oracle_p95_s", "ideal_p95_s")}


def _reading(target: Target, entry: JsonDict) -> str:
    unit = target.unit
    sentences = [
        f"{target.label.strip()} {show(entry['value'], unit)} against {entry['target']}: short "
        f"by {_amount(entry['short_by'], unit)}."
    ]
    sentences += _floor_sentences(target, entry)
    sentences += _ceiling_sentences(target, entry)
    sentences += _ablation_sentences(target, entry)
    return " ".join(sentences)


def _floor_sentences(target: Target, entry: JsonDict) -> list[str]:
    floor = entry.get("floor")
    if not floor:
        return []
    oracle, routed, ideal = floor["oracle_p95_s"], floor["routed_p95_s"], floor["ideal_p95_s"]
    out = []
    if target.judge(oracle) is False:
        out.append(
            f"Out of any router's reach on these answers: generated alone, with a perfect "
            f"router and an exact cache, their p95 is {oracle:.2f} s, "
            f"{_amount(_gap(target, oracle), 's')} past the bound; the answers' own generation "
            f"time holds the line back."
        )
        if ideal is not None and target.judge(ideal):
            out.append(
                f"A semantic cache that also served every paraphrase of a question asked before "
                f"would give {ideal:.2f} s: the paraphrases it did not serve hold the line back "
                f"too."
            )
        elif ideal is not None:
            out.append(f"Even a cache serving every paraphrase too: {ideal:.2f} s.")
    else:
        out.append(f"With a perfect router and an exact cache, answers alone: p95 {oracle:.2f} s.")
    if routed is not None:
        out.append(
            f"As this strategy routed and cached, answers alone: {routed:.2f} s; queueing, "
            f"batching and the gateway add {entry['value'] - routed:+.2f} s."
        )
    return out


def _ceiling_sentences(target: Target, entry: JsonDict) -> list[str]:
    ceiling, hits = entry.get("ceiling"), entry.get("hits") or {}
    if not ceiling:
        return []
    exact, semantic = show(hits.get("exact"), "%"), show(hits.get("semantic"), "%")
    out = [
        f"{ceiling['any']:.1%} of the stage's requests repeat a question the gateway was asked "
        f"before ({ceiling['verbatim']:.1%} verbatim, {ceiling['paraphrase']:.1%} as a "
        f"paraphrase); served: {exact} exact, {semantic} semantic."
    ]
    if target.judge(ceiling["any"]) is False:
        out.append("No cache can meet the line on this traffic: the workload's repeats hold it "
                   "back.")  # fmt: skip
    else:
        out.append("A cache serving every repeat would meet it: what the caches did not serve "
                   "holds it back.")  # fmt: skip
    return out


def _ablation_sentences(target: Target, entry: JsonDict) -> list[str]:
    judged = [a for a in entry["ablations"] if a["value"] is not None]
    if not judged:
        return ["No ablation ran at this stage (`--strategies article` runs them)."]
    unit, out = target.unit, []
    toward = [a for a in judged if _toward(target, a["change"]) > 0]
    for a in sorted(toward, key=lambda a: -_toward(target, a["change"])):
        moved = _amount(abs(a["change"]), unit)
        if a["pass"]:
            out.append(f"Without {a['part']} it is met ({show(a['value'], unit)}): "
                       f"{a['part']} holds it back by {moved}.")  # fmt: skip
        else:
            out.append(f"Without {a['part']} it is {moved} nearer ({show(a['value'], unit)}), "
                       f"still short.")  # fmt: skip
    helping = [a for a in judged if a not in toward]
    if helping:
        shown = "; ".join(f"without {a['part']} {show(a['value'], unit)}" for a in helping)
        which = "any part" if not toward else "any other part"
        out.append(f"Removing {which} leaves it as far or further ({shown}).")
    return out


def _toward(target: Target, change: float | None) -> float:
    """How far ``change`` moves a figure toward its bound (negative: away)."""
    if change is None:
        return 0.0
    return -change if target.op in ("<", "<=") else change


def _amount(gap: float, unit: str) -> str:
    return f"{gap:.2f} s" if unit == "s" else f"{gap * 100:.1f} points"
