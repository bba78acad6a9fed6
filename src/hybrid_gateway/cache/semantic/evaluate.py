"""Measure and calibrate the hit decision on labelled pairs (``cache eval`` / ``cache calibrate``).

Up to three rules are measured side by side, each calibrated on the DEV pairs and measured on
TEST:

    plain     cosine >= threshold (what every other semantic cache ships, with a fixed number)
    decision  the full hit decision: cosine >= threshold and the guards (``guards.py``)
    verifier  the learned pair verifier's score >= threshold (``verifier.py``): trained on one
              half of DEV, its threshold calibrated on the other half (or, for a model trained
              elsewhere, on all of DEV less the model's own training pairs, which are left out
              of TEST too and counted in ``excluded``)

For the decision, the guards themselves are chosen on DEV: greedily, in a fixed order, a guard
is kept when it raises the recall reached at the target precision on DEV, or leaves it equal
without costing ranking quality (AUC) beyond noise.  A guard that catches no trap in this data
but costs nothing stays on (other traffic has those traps); one that vetoes many true
paraphrases here (capitalised words in English questions, say) is left off.
Nothing is fitted on TEST: its figures are what an operator would see on new traffic of the
same kind.  ``best_recall`` is the oracle (the best threshold chosen on TEST itself), shown only
to say how much the calibration's caution costs.

In the JSON, a rule whose threshold could not be calibrated (no threshold's precision bound
reaches the target on DEV) has ``target_met: false`` and ``threshold: null``; a precision over
no hits, or an AUC over one class, is ``null``: never a number that was not measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from hybrid_gateway.cache.semantic import guards as guard_checks
from hybrid_gateway.cache.semantic.calibrate import (
    Bools,
    Floats,
    Operating,
    best_recall_at,
    calibrate_threshold,
    operating,
    roc_auc,
)
from hybrid_gateway.cache.semantic.pairs import Pair, split_pairs
from hybrid_gateway.cache.semantic.verifier import PairVerifier, VerifierError, pair_features
from hybrid_gateway.cache.semantic.verifier_train import (
    DEFAULT_TRAINING,
    TrainSettings,
    train_verifier,
)
from hybrid_gateway.embedding.base import Matrix

Ints = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True)
class ScoredPairs:
    pairs: Sequence[Pair]
    cosine: Floats
    labels: Bools
    a: Matrix | None = None  # the embeddings, for the verifier's features
    b: Matrix | None = None

    @classmethod
    def of(cls, pairs: Sequence[Pair], a: Matrix, b: Matrix) -> ScoredPairs:
        cosine = np.einsum("ij,ij->i", a, b).astype(np.float64)
        return cls(pairs, cosine, np.array([p.same for p in pairs], dtype=bool), a, b)

    def subset(self, rows: Ints) -> ScoredPairs:
        a = None if self.a is None else self.a[rows]
        b = None if self.b is None else self.b[rows]
        return ScoredPairs([self.pairs[i] for i in rows], self.cosine[rows], self.labels[rows],
                           a, b)  # fmt: skip

    def features(self) -> Floats:
        """The verifier's feature matrix of these pairs (needs the embeddings)."""
        if self.a is None or self.b is None:
            raise ValueError("these pairs were scored without their embeddings")
        return pair_features([p.a for p in self.pairs], [p.b for p in self.pairs], self.a, self.b)

    def guarded(self, names: Sequence[str]) -> Floats:
        """Cosine where every named guard passes, minus infinity where one fails."""
        if not names:
            return self.cosine
        ok = np.array([guard_checks.check(p.a, p.b, tuple(names)).ok for p in self.pairs])
        return np.where(ok, self.cosine, -math.inf)


@dataclass(frozen=True, slots=True)
class RuleReport:
    """One rule, calibrated on DEV and measured on TEST."""

    threshold: float
    precision: float
    recall: float
    hit_rate: float
    auc: float
    n: int
    best_recall: float  # oracle recall at the target on TEST
    dev_precision: float
    dev_recall: float
    guards: tuple[str, ...]

    @property
    def target_met(self) -> bool:
        """Whether a threshold was calibrated (its precision bound reached the target on DEV)."""
        return not math.isinf(self.threshold)

    def as_json(self) -> dict[str, object]:
        out = asdict(self)
        out["guards"] = list(self.guards)
        out["threshold"] = round(self.threshold, 6) if self.target_met else None
        out["target_met"] = self.target_met
        # the precision of no hits is undefined (``operating`` says 1.0): hit_rate is exactly
        # 0 when there are none; on DEV, a calibrated threshold always has hits
        if self.n == 0 or self.hit_rate == 0:
            out["precision"] = None
        if not self.target_met:
            out["dev_precision"] = None
        return {k: _number(v) for k, v in out.items()}


def _number(value: object) -> object:
    """Floats for JSON: rounded, and null where not finite (an AUC of one class is NaN)."""
    if not isinstance(value, float):
        return value
    return round(value, 4) if math.isfinite(value) else None


def choose_guards(dev: ScoredPairs, target: float, z: float) -> tuple[str, ...]:
    chosen: tuple[str, ...] = ()
    best = _merit(dev, chosen, target, z)
    for name in guard_checks.GUARD_NAMES:
        trial = (*chosen, name)
        merit = _merit(dev, trial, target, z)
        # more recall at the target wins; at equal recall, a guard must not cost ranking
        # quality (AUC over all pairs, with its vetoes ranked last) beyond noise
        if merit[0] > best[0] or (merit[0] == best[0] and merit[1] >= best[1] - _AUC_NOISE):
            chosen, best = trial, merit
    return chosen


_AUC_NOISE = 0.005


def _merit(
    dev: ScoredPairs, guards: tuple[str, ...], target: float, z: float
) -> tuple[float, float]:
    scores = dev.guarded(guards)
    return _calibrated(scores, dev.labels, target, z).recall, roc_auc(scores, dev.labels)


def _calibrated(scores: Floats, labels: Bools, target: float, z: float) -> Operating:
    return operating(scores, labels, calibrate_threshold(scores, labels, target, z))


def evaluate_rule(
    dev: ScoredPairs, test: ScoredPairs, guards: tuple[str, ...], target: float, z: float
) -> RuleReport:
    dev_scores, test_scores = dev.guarded(guards), test.guarded(guards)
    return measured(dev_scores, dev.labels, test_scores, test.labels, target, z, guards)


def measured(
    dev_scores: Floats,
    dev_labels: Bools,
    test_scores: Floats,
    test_labels: Bools,
    target: float,
    z: float,
    guards: tuple[str, ...] = (),
) -> RuleReport:
    """A score rule's threshold calibrated on the DEV scores, its figures on the TEST ones."""
    threshold = calibrate_threshold(dev_scores, dev_labels, target, z)
    on_dev = operating(dev_scores, dev_labels, threshold)
    on_test = operating(test_scores, test_labels, threshold)
    return RuleReport(
        threshold=threshold, precision=on_test.precision, recall=on_test.recall,
        hit_rate=on_test.hit_rate, auc=roc_auc(test_scores, test_labels), n=on_test.n,
        best_recall=best_recall_at(test_scores, test_labels, target).recall,
        dev_precision=on_dev.precision, dev_recall=on_dev.recall, guards=guards,
    )  # fmt: skip


# The verifier rule splits DEV again (train / calibrate) by the same kind of seeded hash as the
# outer split, so a reversed duplicate never sits on both sides.  The inner seed must differ
# from the outer split seed, or the DEV half (all one side of the outer hash) would not split:
# it is INNER_SEED for every split seed but INNER_SEED itself (so the published splits stay as
# they were), and INNER_SEED - 1 there.
INNER_SEED = -7


def inner_seed(split_seed: int | None) -> int:
    """The seed of DEV's inner split, never equal to the outer ``split_seed``."""
    return INNER_SEED - 1 if split_seed == INNER_SEED else INNER_SEED


def dev_halves(dev: ScoredPairs, split_seed: int | None = None) -> tuple[ScoredPairs, ScoredPairs]:
    """DEV (the first half of ``split_seed``'s split, if any) split into the verifier's
    training part and its calibration part."""
    train, _ = split_pairs(dev.pairs, seed=inner_seed(split_seed))
    chosen = {id(p) for p in train}
    mask = np.array([id(p) in chosen for p in dev.pairs], dtype=bool)
    return dev.subset(np.flatnonzero(mask)), dev.subset(np.flatnonzero(~mask))


def evaluate_verifier(
    dev: ScoredPairs,
    test: ScoredPairs,
    target: float,
    z: float,
    *,
    namespace: str = "",
    settings: TrainSettings = DEFAULT_TRAINING,
    split_seed: int | None = None,
) -> RuleReport:
    """The verifier rule trained on one half of DEV, its threshold calibrated on the other
    half, measured on TEST (a model trained elsewhere: ``unseen`` + ``verifier_rule``).
    Raises ``VerifierError`` when no pair is left to train, calibrate or measure on.
    """
    fit, calib = dev_halves(dev, split_seed)
    if not len(fit.pairs) or not len(calib.pairs):
        raise VerifierError(
            f"DEV has {len(dev.pairs)} pairs: too few to train a verifier on one half and "
            "calibrate it on the other"
        )
    model = train_verifier(fit.features(), fit.labels, namespace=namespace,
                           settings=settings).model  # fmt: skip
    return verifier_rule(model, calib, test, target, z)


def verifier_rule(
    model: PairVerifier, calib: ScoredPairs, test: ScoredPairs, target: float, z: float
) -> RuleReport:
    """``model``'s threshold calibrated on ``calib``, measured on ``test`` (both already
    without its training pairs: ``unseen``)."""
    for name, part in (("DEV", calib), ("TEST", test)):
        if not len(part.pairs):
            raise VerifierError(
                f"every {name} pair is one the verifier was trained on: calibrate and "
                "measure it on other pairs (another --split-seed, or other files)"
            )
    dev_scores, test_scores = model.scores(calib.features()), model.scores(test.features())
    return measured(dev_scores, calib.labels, test_scores, test.labels, target, z)


def unseen(scored: ScoredPairs, model: PairVerifier) -> ScoredPairs:
    """The pairs ``model`` was not trained on (all of them when its file does not say)."""
    keep = [i for i, p in enumerate(scored.pairs) if not model.was_trained_on(p.a, p.b)]
    if len(keep) == len(scored.pairs):
        return scored
    return scored.subset(np.array(keep, dtype=np.intp))


@dataclass(frozen=True, slots=True)
class EvalReport:
    target_precision: float
    plain: RuleReport
    decision: RuleReport
    dev_n: int
    verifier: RuleReport | None = None
    # DEV + TEST pairs left out of the verifier rule as the given model's training pairs
    # (0 for a verifier trained here on half of DEV; None: the model file does not say)
    verifier_excluded: int | None = 0

    def as_json(self) -> dict[str, object]:
        top = self.decision.as_json()
        out = {
            # the full decision's figures at the top level (what the gateway would do) ...
            "threshold": top["threshold"], "precision": top["precision"],
            "recall": top["recall"], "auc": top["auc"], "n": top["n"],
            "target_met": top["target_met"],
            "guards": top["guards"], "target_precision": self.target_precision,
            "dev_n": self.dev_n,
            # ... and every rule in full
            "plain": self.plain.as_json(), "decision": top,
        }  # fmt: skip
        if self.verifier is not None:
            out["verifier"] = self.verifier.as_json() | {"excluded": self.verifier_excluded}
        return out


def evaluate(
    dev: ScoredPairs,
    test: ScoredPairs,
    target: float,
    z: float = 1.645,
    *,
    verifier: bool = False,
    model: PairVerifier | None = None,
    namespace: str = "",
    split_seed: int | None = None,
) -> EvalReport:
    """Plain and decision; with ``verifier`` (or a ``model``) the verifier rule too.

    ``split_seed``: the outer split DEV and TEST came from, if any (the verifier's inner
    split of DEV must use another seed)."""
    guards = choose_guards(dev, target, z)
    learned = None
    excluded: int | None = 0
    if model is not None:  # its training pairs left out once, and counted
        calib, measured_on = unseen(dev, model), unseen(test, model)
        kept = len(calib.pairs) + len(measured_on.pairs)
        known = model.trained_pairs is not None
        excluded = len(dev.pairs) + len(test.pairs) - kept if known else None
        learned = verifier_rule(model, calib, measured_on, target, z)
    elif verifier:
        learned = evaluate_verifier(dev, test, target, z, namespace=namespace,
                                    split_seed=split_seed)  # fmt: skip
    return EvalReport(
        target_precision=target,
        plain=evaluate_rule(dev, test, (), target, z),
        decision=evaluate_rule(dev, test, guards, target, z),
        dev_n=len(dev.pairs),
        verifier=learned,
        verifier_excluded=excluded,
    )
