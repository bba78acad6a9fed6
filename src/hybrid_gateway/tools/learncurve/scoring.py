"""The curves' figures, as pure functions of labels, scores and results (unit-tested).

Router: APGR (``routing/evaluation.py``, RouteLLM's measure) of a model's scores on items with
outcome labels, and the cost of its cheapest operating point that keeps the bench's quality
(an answer at least as good as the heavy model's, ``light_ok >= heavy_ok``) at a floor.
Cache: semantic hits and false hits (the answer's mark names another question's group) of a
run's results, cumulated along the run.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hybrid_gateway.routing.evaluation import router_quality
from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.workload.schema import WorkloadItem, last_user_text

__all__ = [
    "CacheTally",
    "cache_tally",
    "curve_at",
    "router_figures",
    "split_interleaved",
    "split_unseen",
    "wilson_upper",
]

F64 = npt.NDArray[np.float64]


def split_unseen(
    items: Sequence[WorkloadItem], unseen: int
) -> tuple[list[WorkloadItem], list[WorkloadItem]]:
    """(the first part, the later unseen part): the last ``unseen`` items, less any whose
    question the first part also asks and any repeat among them."""
    if not 0 < unseen < len(items):
        raise ValueError(f"the unseen part must be between 1 and {len(items) - 1} items")
    first = list(items[:-unseen])
    return first, _never_asked(items[-unseen:], first)


def split_interleaved(
    items: Sequence[WorkloadItem], unseen: int
) -> tuple[list[WorkloadItem], list[WorkloadItem]]:
    """(the items sent, about ``unseen`` items spread evenly through the workload): every k-th
    item is kept back, less any whose question a sent item also asks and any repeat among them.
    A long build drifts (``workload build`` says where its smaller sources run out), so its
    last items are another mix than the rest; an even spread keeps the sent part's mix."""
    if not 0 < unseen < len(items):
        raise ValueError(f"the unseen part must be between 1 and {len(items) - 1} items")
    step = len(items) / unseen
    held = {int(k * step) for k in range(unseen)}
    first = [item for n, item in enumerate(items) if n not in held]
    return first, _never_asked([items[n] for n in sorted(held)], first)


def _never_asked(
    candidates: Sequence[WorkloadItem], sent: Sequence[WorkloadItem]
) -> list[WorkloadItem]:
    """``candidates`` less any whose question ``sent`` asks and any repeat among them."""
    asked = {last_user_text(i.messages) for i in sent}
    later: list[WorkloadItem] = []
    for item in candidates:
        text = last_user_text(item.messages)
        if text not in asked:
            asked.add(text)
            later.append(item)
    return later


def _quality_by_k(scores: F64, weak: F64, strong: F64) -> F64:
    """The bench's quality (share answered at least as well as heavy) with the top k heavy."""
    order = np.argsort(-scores, kind="stable")
    light_ok = (weak >= strong).astype(np.float64)[order]
    gain = 1.0 - light_ok  # a heavy answer is always as good as the heavy answer
    return (float(light_ok.sum()) + np.concatenate([[0.0], np.cumsum(gain)])) / len(scores)


def router_figures(
    scores: F64, weak: F64, strong: F64, light_cost_ratio: float, floor: float = 0.99
) -> dict[str, Any]:
    """APGR, CPT(50 %)/CPT(80 %), and the share of heavy calls (and relative cost, a light
    answer costing ``light_cost_ratio`` of a heavy one) of the fewest top-scored heavy calls
    whose quality reaches ``floor``."""
    quality = router_quality(scores, weak, strong)
    by_k = _quality_by_k(scores, weak, strong)
    k = int(np.nonzero(by_k >= floor - 1e-12)[0][0])
    share = k / len(scores)
    return {
        **quality.as_json(),
        "heavy_share_at_floor": round(share, 4),
        "relative_cost_at_floor": round(share + (1 - share) * light_cost_ratio, 4),
        "quality_floor": floor,
    }


@dataclass(frozen=True, slots=True)
class CacheTally:
    requests: int
    hits: int  # semantic hits served
    false_hits: int  # of those, answers to another question (the mark's group differs)

    @property
    def hit_rate(self) -> float:
        return self.hits / self.requests if self.requests else 0.0

    @property
    def false_hit_rate(self) -> float | None:
        return self.false_hits / self.hits if self.hits else None

    def as_json(self) -> dict[str, Any]:
        rate = self.false_hit_rate
        return {"requests": self.requests, "hits": self.hits, "false_hits": self.false_hits,
                "hit_rate": round(self.hit_rate, 4),
                "false_hit_rate": None if rate is None else round(rate, 4),
                "false_hit_upper_95": round(wilson_upper(self.false_hits, self.hits), 4),
                }  # fmt: skip


def cache_tally(results: Sequence[RequestResult], groups: Mapping[str, str]) -> CacheTally:
    """Semantic hits and false hits of ``results``; ``groups`` maps item id -> its group."""
    hits = [r for r in results if r.cache == "semantic" and r.status == 200]
    false = sum(1 for r in hits if r.mark_group is not None and r.mark_group != groups[r.item])
    return CacheTally(len(results), len(hits), false)


def wilson_upper(failures: int, trials: int, z: float = 1.96) -> float:
    """Upper end of the Wilson score interval of failures / trials (1.0 with no trial)."""
    if trials == 0:
        return 1.0
    p = failures / trials
    centre = p + z * z / (2 * trials)
    spread = z * np.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    return float(min(1.0, (centre + spread) / (1 + z * z / trials)))


def curve_at(curve_csv: Path, threshold: float, rule: str = "plain") -> dict[str, float] | None:
    """The row of a ``cache eval --curve-out`` CSV that a threshold selects: the lowest curve
    threshold at or above it (what a cut at ``threshold`` serves); None above the curve."""
    with curve_csv.open(newline="", encoding="utf-8") as source:
        rows = [r for r in csv.DictReader(source) if r["rule"] == rule]
    above = [r for r in rows if float(r["threshold"]) >= threshold - 1e-9]
    if not above:
        return None
    row = min(above, key=lambda r: float(r["threshold"]))
    return {k: float(row[k]) for k in ("threshold", "precision", "recall", "hit_rate", "hits")}
