"""Pick a threshold for a target precision, and the curve and figures that justify it.

A cache hit is a claim "this stored answer answers your question".  Its false-hit rate is
``1 - precision`` among the hits, so the operator sets a target precision and the threshold
follows from labelled pairs.  A point estimate of precision on a few hundred pairs is noisy;
calibrating to it would land below the target about half the time on new pairs.  We take the
lowest threshold whose *lower confidence bound* (one-sided Wilson score interval, z = 1.645 by
default, 95 %) meets the target, so the realised precision on held-out pairs of the same kind
stays at or above the target with high probability, and the recall given up for that is small.

Scores here are any "higher means more likely the same question" number: plain cosine, or the
full decision's score with vetoed pairs (a guard failed) at minus infinity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]

NEVER = math.inf  # the threshold when no threshold meets the target: nothing is a hit


@dataclass(frozen=True, slots=True)
class CurvePoint:
    threshold: float
    precision: float
    recall: float
    hit_rate: float  # share of all pairs accepted
    hits: int


@dataclass(frozen=True, slots=True)
class Operating:
    """The figures at one threshold."""

    threshold: float
    precision: float
    recall: float
    hit_rate: float
    hits: int
    n: int


def wilson_lower(successes: Floats, trials: Floats, z: float) -> Floats:
    """One-sided Wilson lower bound of a proportion, elementwise (0 where trials is 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p = successes / trials
        denom = 1 + z * z / trials
        centre = p + z * z / (2 * trials)
        margin = z * np.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
        bound = (centre - margin) / denom
    return np.where(trials > 0, bound, 0.0)


def _sorted_counts(scores: Floats, labels: Bools) -> tuple[Floats, Floats, Floats]:
    """Distinct finite thresholds (descending) and true/all hits at each (score >= threshold)."""
    finite = np.isfinite(scores)
    s: Floats = scores[finite]
    order = np.argsort(-s, kind="stable")
    s = s[order]
    y: Floats = labels[finite][order].astype(np.float64)
    tp: Floats = np.cumsum(y)
    hits: Floats = np.arange(1, len(s) + 1, dtype=np.float64)
    last: Bools = np.r_[s[1:] != s[:-1], True] if len(s) else np.zeros(0, dtype=bool)
    return s[last], tp[last], hits[last]


def calibrate_threshold(
    scores: Sequence[float] | Floats,
    labels: Sequence[bool] | Bools,
    target: float,
    z: float = 1.645,
) -> float:
    """The lowest threshold whose precision lower bound is >= ``target``; ``NEVER`` if none."""
    thresholds, tp, hits = _sorted_counts(np.asarray(scores, float), np.asarray(labels, bool))
    ok = np.flatnonzero(wilson_lower(tp, hits, z) >= target)
    return float(thresholds[ok[-1]]) if len(ok) else NEVER


def operating(
    scores: Sequence[float] | Floats, labels: Sequence[bool] | Bools, threshold: float
) -> Operating:
    s, y = np.asarray(scores, float), np.asarray(labels, bool)
    accepted = s >= threshold
    hits, tp, positives = int(accepted.sum()), int((accepted & y).sum()), int(y.sum())
    return Operating(
        threshold=threshold,
        precision=tp / hits if hits else 1.0,
        recall=tp / positives if positives else 0.0,
        hit_rate=hits / len(s) if len(s) else 0.0,
        hits=hits,
        n=len(s),
    )


def best_recall_at(
    scores: Sequence[float] | Floats, labels: Sequence[bool] | Bools, target: float
) -> Operating:
    """The oracle: the highest recall any threshold reaches at precision >= ``target`` here."""
    s, y = np.asarray(scores, float), np.asarray(labels, bool)
    thresholds, tp, hits = _sorted_counts(s, y)
    ok = np.flatnonzero(tp / np.maximum(hits, 1) >= target)
    return operating(s, y, float(thresholds[ok[-1]]) if len(ok) else NEVER)


def roc_auc(scores: Sequence[float] | Floats, labels: Sequence[bool] | Bools) -> float:
    """Area under the ROC curve (ties count half); vetoed pairs (-inf) rank lowest."""
    s, y = np.asarray(scores, float), np.asarray(labels, bool)
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        return math.nan
    s = np.where(np.isfinite(s), s, -1e9)
    order = np.argsort(s, kind="stable")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_s = s[order]
    # average ranks over ties
    _, first, counts = np.unique(sorted_s, return_index=True, return_counts=True)
    avg = first + (counts - 1) / 2.0 + 1
    ranks[order] = np.repeat(avg, counts)
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


def curve(
    scores: Sequence[float] | Floats, labels: Sequence[bool] | Bools, steps: int = 101
) -> list[CurvePoint]:
    """Precision, recall and hit rate at evenly spaced thresholds over the finite score range."""
    s, y = np.asarray(scores, float), np.asarray(labels, bool)
    finite = s[np.isfinite(s)]
    if not len(finite):
        return []
    points = []
    for t in np.linspace(float(finite.min()), float(finite.max()), steps):
        op = operating(s, y, float(t))
        points.append(CurvePoint(float(t), op.precision, op.recall, op.hit_rate, op.hits))
    return points
