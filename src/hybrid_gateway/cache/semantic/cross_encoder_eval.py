"""The cross-encoder reranker rule on labelled pairs (``cache eval / calibrate --reranker``).

The rule is the one the gateway runs with a calibrated reranker: the nearest entry must have
``cosine >= cosine_floor`` (so the model is only asked about plausible candidates), then the
reranker's score must be ``>= min_score``.  Both come from DEV: the floor keeps 99 % of DEV's
true paraphrases, and ``min_score`` is the cache's Wilson-bound calibration of the reranker
score among the pairs above the floor.  Pairs the model was trained on (the model file keeps
their digests) are dropped from DEV and TEST first and counted in ``excluded``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import numpy as np

from hybrid_gateway.cache.semantic.calibrate import (
    Floats,
    best_recall_at,
    calibrate_threshold,
    operating,
    roc_auc,
)
from hybrid_gateway.cache.semantic.cross_encoder import CrossEncoder
from hybrid_gateway.cache.semantic.evaluate import RuleReport, ScoredPairs

POSITIVES_KEPT = 0.99  # share of DEV's true paraphrases the cosine floor lets through


@dataclass(frozen=True, slots=True)
class RerankerReport:
    rule: RuleReport
    cosine_floor: float
    excluded: int  # DEV + TEST pairs dropped because the model was trained on them

    def as_json(self) -> dict[str, object]:
        return self.rule.as_json() | {"cosine_floor": round(self.cosine_floor, 6),
                                      "excluded": self.excluded}  # fmt: skip


def unseen(scored: ScoredPairs, model: CrossEncoder) -> ScoredPairs:
    keep = [i for i, p in enumerate(scored.pairs) if not model.was_trained_on(p.a, p.b)]
    return scored.subset(np.array(keep, dtype=np.intp))


def cosine_floor(dev: ScoredPairs) -> float:
    positives = dev.cosine[dev.labels]
    if not len(positives):
        return float(dev.cosine.max(initial=1.0))
    return float(np.quantile(positives, 1.0 - POSITIVES_KEPT, method="lower"))


def reranked(scored: ScoredPairs, model: CrossEncoder, floor: float, label: str) -> Floats:
    """Reranker scores above the cosine floor, ``-inf`` below it (never asked)."""
    out = np.full(len(scored.pairs), -np.inf)
    asked = np.flatnonzero(scored.cosine >= floor)
    started = time.perf_counter()
    for n, i in enumerate(asked, 1):
        pair = scored.pairs[int(i)]
        out[i] = model.score(pair.a, pair.b)
        if n % 500 == 0 or n == len(asked):
            print(f"reranking {label}: {n}/{len(asked)} ({time.perf_counter() - started:.0f} s)",
                  file=sys.stderr)  # fmt: skip
    return out


def evaluate_reranker(
    dev: ScoredPairs, test: ScoredPairs, model: CrossEncoder, target: float, z: float
) -> RerankerReport:
    """The reranker rule calibrated on DEV and measured on TEST (training pairs left out)."""
    dev_kept, test_kept = unseen(dev, model), unseen(test, model)
    excluded = len(dev.pairs) - len(dev_kept.pairs) + len(test.pairs) - len(test_kept.pairs)
    floor = cosine_floor(dev_kept)
    dev_scores = reranked(dev_kept, model, floor, "DEV")
    test_scores = reranked(test_kept, model, floor, "TEST")
    threshold = calibrate_threshold(dev_scores, dev_kept.labels, target, z)
    on_dev = operating(dev_scores, dev_kept.labels, threshold)
    on_test = operating(test_scores, test_kept.labels, threshold)
    rule = RuleReport(
        threshold=threshold, precision=on_test.precision, recall=on_test.recall,
        hit_rate=on_test.hit_rate, auc=roc_auc(test_scores, test_kept.labels), n=on_test.n,
        best_recall=best_recall_at(test_scores, test_kept.labels, target).recall,
        dev_precision=on_dev.precision, dev_recall=on_dev.recall, guards=(),
    )  # fmt: skip
    return RerankerReport(rule, floor, excluded)
