"""Calibration under an SLA: the cheapest threshold that keeps quality above a stated floor.

Quality is relative to heavy-only: the mean score of the routed answers divided by the mean
score had every prompt gone to the heavy model (1.0 = as good as heavy-only).  Cost is relative
too: a light call costs ``light_cost`` of a heavy one (from the two lanes' channel prices).

Category gates come first, as the requirement reads: a category (an MMLU subject, a RouterBench
task, ...) whose light-model quality on its own is below the floor always goes heavy, however
cheap the light model is.  Categories with fewer than ``min_rows`` rows are not judged.  The
threshold is then the largest one (fewest heavy calls) whose overall quality, with the gates in
force, still meets the floor.

Through the rules (``fixed``): in the gateway the config's rules decide first, so a question a
rule sends to a lane never reaches the classifier.  Given each row's rule decision (heavy,
light, or None where the classifier decides), the curve and the floor are over all rows, with
the rule-decided ones where their rules send them: the threshold that meets the floor end to
end, not only on the questions the classifier would see alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class CurvePoint:
    threshold: float
    heavy_share: float
    cost: float  # per request, relative to heavy-only
    quality: float  # relative to heavy-only


@dataclass(frozen=True, slots=True)
class Gate:
    category: str
    rows: int
    light_quality: float  # mean weak / mean strong in this category


@dataclass(frozen=True, slots=True)
class Calibration:
    chosen: CurvePoint | None  # None: even all-heavy (with gates) misses the floor
    curve: tuple[CurvePoint, ...]  # thresholds 0.00, 0.01, ... 1.00 plus the chosen one
    gates: tuple[Gate, ...]  # categories sent to heavy
    judged: int  # categories with enough rows to judge


def category_gates(
    categories: Sequence[str], weak: F64, strong: F64, floor: float, min_rows: int
) -> tuple[tuple[Gate, ...], int]:
    cats = np.array(categories)
    gates: list[Gate] = []
    judged = 0
    for category in sorted(set(categories) - {""}):
        mask = cats == category
        if int(mask.sum()) < min_rows:
            continue
        judged += 1
        heavy = float(strong[mask].mean())
        quality = float(weak[mask].mean()) / heavy if heavy > 0 else 1.0
        if quality < floor:
            gates.append(Gate(category, int(mask.sum()), quality))
    return tuple(gates), judged


def _point(
    t: float, p: F64, gated: npt.NDArray[np.bool_], weak: F64, strong: F64, light_cost: float
) -> CurvePoint:
    heavy = gated | (p >= t)  # p: +inf / -inf where a rule sends the row heavy / light
    share = float(heavy.mean())
    quality = float(np.where(heavy, strong, weak).mean() / strong.mean())
    return CurvePoint(t, share, share + (1 - share) * light_cost, quality)


def calibrate(
    p: F64,
    weak: F64,
    strong: F64,
    categories: Sequence[str],
    *,
    floor: float,
    light_cost: float,
    min_rows: int = 20,
    fixed: Sequence[bool | None] | None = None,
) -> Calibration:
    """``fixed``: per row, True / False where a rule sends it heavy / light (the threshold does
    not move it; a gated category still goes heavy: the gateway applies gates before rules),
    None where the classifier decides."""
    gates, judged = category_gates(categories, weak, strong, floor, min_rows)
    gated_names = {g.category for g in gates}
    free = np.ones(len(p), dtype=bool) if fixed is None else np.array([f is None for f in fixed])
    gated = np.array([c in gated_names for c in categories], dtype=bool)
    if fixed is not None:
        p = np.where(free, p, np.array([np.inf if f else -np.inf for f in fixed]))
    # Every distinct score is a candidate threshold (plus "nothing by score" above the max).
    scores = p[free]
    top = np.nextafter(scores.max(), np.inf) if len(scores) else 1.0
    candidates = np.unique(np.concatenate([scores, [top]]))
    meeting = [
        pt
        for t in candidates
        if (pt := _point(float(t), p, gated, weak, strong, light_cost)).quality >= floor - 1e-12
    ]
    chosen = max(meeting, key=lambda pt: (-pt.cost, pt.threshold)) if meeting else None
    grid = [_point(float(t), p, gated, weak, strong, light_cost) for t in np.linspace(0, 1, 101)]
    if chosen is not None:
        grid.append(chosen)
    curve = tuple(sorted(grid, key=lambda pt: pt.threshold))
    return Calibration(chosen, curve, gates, judged)
