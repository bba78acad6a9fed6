"""The cross-encoder reranker rule on labelled pairs (``cache eval / calibrate --reranker``).

The rule is the one the gateway runs with a calibrated reranker: the nearest entry must have
``cosine >= cosine_floor`` (so the model is only asked about plausible candidates), then
``reranker score + cosine_weight * cosine`` must be ``>= min_score``.  Both come from DEV: the
floor keeps 99 % of DEV's true paraphrases, and ``min_score`` is the cache's Wilson-bound
calibration of that sum among the pairs above the floor.  Pairs the model was trained on (the
model file keeps their digests) are dropped from DEV and TEST first and counted in
``excluded``.  Why the cosine: the fine-tuned model gives its confident positives nearly the
same score (its ceiling), so a threshold among them moves in large steps of recall; with
weight 1 the cosine spreads them (the candidates' cosines differ by at most ~0.07, the
model's logits span several units): it reorders only pairs the model scores within ~0.07.

Cross-fitting: given several models trained on disjoint parts of DEV (``train-reranker --part
1`` and ``--part 2``), each pair is scored by the first model that did not see it, so every DEV
pair calibrates (twice the pairs of one model's left-out half: a tighter bound) while the
gateway serves the first model.  Models fitted the same way on exchangeable halves score
unseen pairs alike; that is the assumption this rests on.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hybrid_gateway.cache.semantic.calibrate import Floats
from hybrid_gateway.cache.semantic.cross_encoder import CrossEncoder, CrossEncoderError
from hybrid_gateway.cache.semantic.evaluate import RuleReport, ScoredPairs, measured

POSITIVES_KEPT = 0.99  # share of DEV's true paraphrases the cosine floor lets through


@dataclass(frozen=True, slots=True)
class RerankerReport:
    rule: RuleReport
    cosine_floor: float
    cosine_weight: float
    excluded: int  # DEV + TEST pairs dropped because the model was trained on them

    def as_json(self) -> dict[str, object]:
        return self.rule.as_json() | {"cosine_floor": round(self.cosine_floor, 6),
                                      "cosine_weight": self.cosine_weight,
                                      "excluded": self.excluded}  # fmt: skip


def scorers(scored: ScoredPairs, models: Sequence[CrossEncoder]) -> npt.NDArray[np.intp]:
    """Per pair, the index of the first model not trained on it (-1: every model saw it)."""
    out = np.full(len(scored.pairs), -1, dtype=np.intp)
    for i, p in enumerate(scored.pairs):
        out[i] = next((n for n, m in enumerate(models) if not m.was_trained_on(p.a, p.b)), -1)
    return out


def cosine_floor(dev: ScoredPairs) -> float:
    positives = dev.cosine[dev.labels]
    if not len(positives):
        return float(dev.cosine.max(initial=1.0))
    return float(np.quantile(positives, 1.0 - POSITIVES_KEPT, method="lower"))


def reranked(
    scored: ScoredPairs, models: Sequence[CrossEncoder], by: npt.NDArray[np.intp], floor: float,
    label: str, cosine_weight: float,
) -> Floats:  # fmt: skip
    """The rule's scores above the cosine floor (each pair by its model ``by``: score +
    ``cosine_weight`` * cosine), ``-inf`` below it."""
    out = np.full(len(scored.pairs), -np.inf)
    asked = np.flatnonzero(scored.cosine >= floor)
    started = time.perf_counter()
    for n, i in enumerate(asked, 1):
        pair = scored.pairs[int(i)]
        out[i] = models[int(by[i])].score(pair.a, pair.b) + cosine_weight * scored.cosine[i]
        if n % 500 == 0 or n == len(asked):
            print(f"reranking {label}: {n}/{len(asked)} ({time.perf_counter() - started:.0f} s)",
                  file=sys.stderr)  # fmt: skip
    return out


def evaluate_reranker(
    dev: ScoredPairs,
    test: ScoredPairs,
    models: Sequence[CrossEncoder],
    target: float,
    z: float,
    cosine_weight: float,
) -> RerankerReport:
    """The reranker rule calibrated on DEV and measured on TEST (training pairs left out).

    Raises ``CrossEncoderError`` when DEV or TEST has no pair left."""
    dev_by, test_by = scorers(dev, models), scorers(test, models)
    dev_kept, test_kept = (
        dev.subset(np.flatnonzero(dev_by >= 0)),
        test.subset(np.flatnonzero(test_by >= 0)),
    )
    dev_by, test_by = dev_by[dev_by >= 0], test_by[test_by >= 0]
    for name, part in (("DEV", dev_kept), ("TEST", test_kept)):
        if not len(part.pairs):
            raise CrossEncoderError(
                f"every {name} pair is one the model(s) were trained on: calibrate and measure "
                "on other pairs"
            )
    excluded = len(dev.pairs) - len(dev_kept.pairs)
    floor = cosine_floor(dev_kept)
    dev_scores = reranked(dev_kept, models, dev_by, floor, "DEV", cosine_weight)
    if test is dev:  # `cache calibrate`: the same pairs, scored once
        test_scores = dev_scores
    else:
        excluded += len(test.pairs) - len(test_kept.pairs)
        test_scores = reranked(test_kept, models, test_by, floor, "TEST", cosine_weight)
    rule = measured(dev_scores, dev_kept.labels, test_scores, test_kept.labels, target, z)
    return RerankerReport(rule, floor, cosine_weight, excluded)
