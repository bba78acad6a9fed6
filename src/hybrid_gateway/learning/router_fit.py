"""The router from audited traffic (offline): labels -> outcome rows, a fit with the shipped
model as its prior, and the replay that decides whether a candidate may replace the live model.

Labels.  A ``router`` audit compared the light lane's answer (A) with the heavy lane's (B):
``a_worse`` is an outcome row with weak 0, strong 1 (only the heavy lane answers it well),
``equivalent`` weak 1, strong 1 (a heavy call buys nothing), ``b_worse`` weak 1, strong 0;
the training target is the classifier's own soft label (``routing/training.py``).  Only audits
whose question text is stored (``server.request_log.prompts``: ``full`` or ``redacted``) can
be used.

Prior.  The candidate starts from the live (shipped) model's weights and is pulled back to them
by ``l2 * ||w - w_prior||^2`` (its bias moves freely), in the prior's own feature
standardisation: with few labels it stays near the prior, with many it follows the traffic.

Replay.  On audited labels the candidate was not trained on (the later part, by time), each
model routes its top ``k`` questions by score heavy, for every ``k`` from none to all: a
question routed heavy is answered well unless the heavy answer was the worse one
(``b_worse``), one routed light unless the light answer was (``a_worse``).  The area under that
quality-vs-heavy-share curve is the mean quality over every heavy budget; the candidate is
accepted only when its area is at least the live model's (then, for any share of heavy calls
it spends, on average it answers at least as well).  Audits see only questions the live router
sent light, so the replay compares rankings there, not the live model's own operating point.

Cross-fitting (``folds`` >= 2, instead of a held-out later part).  The audits are dealt into
``folds`` interleaved folds; one model is fitted on all but each fold, and scores that fold:
every audit gets a score from a model that never saw it, and the replay runs on all of them.
The candidate is the mean of the fold models (their logits are linear in one standardisation,
so the mean of the weights is the mean of the logits).  Each label then trains all but one of
the models and is replayed once: with a few hundred labels the fit sees ``1 - 1/folds`` of
them instead of ``1 - holdout``, and the replay all of them instead of ``holdout``.  What the
replay scores is the fold models, not their mean; the mean of models that each passed on
unseen labels is what ships (cross-fitting, as ``cache eval --reranker P1 P2`` does).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hybrid_gateway.learning.labels import Label
from hybrid_gateway.routing.classifier import ClassifierModel, RouterModelError, sigmoid
from hybrid_gateway.routing.heads import LinearHead
from hybrid_gateway.routing.outcomes import OutcomeRow
from hybrid_gateway.routing.training import TrainingSet, scores_of, soft_targets

__all__ = [
    "Candidate",
    "Fit",
    "ReplayResult",
    "fit_with_prior",
    "outcome_rows",
    "replay",
    "train_candidate",
]

F64 = npt.NDArray[np.float64]

_SCORES = {"a_worse": (0.0, 1.0), "equivalent": (1.0, 1.0), "b_worse": (1.0, 0.0)}
SOURCE = "audits"


def outcome_rows(labels: Sequence[Label]) -> list[OutcomeRow]:
    """Router audits with a verdict and a stored question, as outcome rows (oldest first)."""
    rows = []
    for label in sorted(labels, key=lambda lb: lb.ts):
        if label.kind == "router" and label.verdict in _SCORES and label.prompt:
            weak, strong = _SCORES[label.verdict]
            rows.append(OutcomeRow(label.prompt, weak, strong, "", SOURCE))
    return rows


def fit_with_prior(
    data: TrainingSet, prior: ClassifierModel, *, l2: float = 30.0, iterations: int = 25
) -> ClassifierModel:
    head = prior.head
    if not isinstance(head, LinearHead) or prior.memory is not None or prior.ngrams is not None:
        raise RouterModelError("the prior must be a linear model (no outcome heads, memory or "
                               "n-grams), as the shipped one is")  # fmt: skip
    standardised = (data.feats - prior.feature_mean) / prior.feature_std
    x = np.hstack([data.vectors.astype(np.float64), standardised.astype(np.float64),
                   np.ones((len(data.rows), 1))])  # fmt: skip
    start = np.concatenate([head.embed_weights, head.feature_weights, [head.bias]]).astype(
        np.float64
    )
    coef = _newton_towards(x, soft_targets(data), start, l2, iterations)
    dim = head.dim
    fitted = LinearHead(coef[:dim].astype(np.float32), coef[dim:-1].astype(np.float32),
                        float(coef[-1]))  # fmt: skip
    info = dict(prior.info, from_log={"rows": len(data.rows), "l2_towards_prior": l2})
    return ClassifierModel(prior.namespace, fitted, prior.feature_mean, prior.feature_std, info)


def _newton_towards(x: F64, t: F64, prior: F64, l2: float, iterations: int) -> F64:
    """Damped Newton on the penalised log loss: each step is halved until the loss goes down.

    A full Newton step from the prior can overshoot: on 880 audits of the default workload
    (91 % ``equivalent``, soft target 0.5) the first step raised the loss from 1,389 to 13,546,
    and the next ones diverged to logits of 1e11, every score then 0 or 1."""
    penalty = np.full(x.shape[1], l2)
    penalty[-1] = 0.0  # the bias follows the traffic's base rate freely
    coef = prior.copy()
    current = _penalised_loss(x, t, coef, prior, penalty)
    for _ in range(iterations):
        p = sigmoid(x @ coef)
        grad = x.T @ (p - t) + penalty * (coef - prior)
        hess = (x * (p * (1 - p))[:, None]).T @ x + np.diag(penalty) + 1e-9 * np.eye(len(coef))
        step = np.linalg.solve(hess, grad)
        scale = 1.0
        while scale >= _MIN_SCALE:
            trial = coef - scale * step
            value = _penalised_loss(x, t, trial, prior, penalty)
            if value <= current:
                break
            scale /= 2
        else:
            break  # no step lowers the loss: at its minimum to float precision
        coef, current = trial, value
        if scale * float(np.abs(step).max()) < 1e-6:
            break
    return coef


_MIN_SCALE = 1.0 / 1024


def _penalised_loss(x: F64, t: F64, coef: F64, prior: F64, penalty: F64) -> float:
    """Cross-entropy against the soft targets plus ``penalty / 2 * (coef - prior)^2``."""
    z = x @ coef
    return float(np.sum(np.logaddexp(0.0, z) - t * z) + 0.5 * np.sum(penalty * (coef - prior) ** 2))


@dataclass(frozen=True, slots=True)
class ReplayResult:
    labels: int
    live_area: float  # mean quality over every heavy share (0..1)
    candidate_area: float
    accepted: bool
    folds: int = 0  # cross-fitted: the candidate's scores came from this many fold models

    @property
    def unseen(self) -> str:
        """What the replayed questions were, for the candidate."""
        if self.folds:
            return (f"{self.labels} audited questions, each scored by the fold model that "
                    "never saw it")  # fmt: skip
        return f"{self.labels} audited questions it was not trained on"

    def describe(self) -> str:
        verdict = "accepted" if self.accepted else "refused"
        return (f"{verdict}: on {self.unseen}, mean quality over every heavy share "
                f"{self.candidate_area:.4f} (live model {self.live_area:.4f})")  # fmt: skip


def replay(
    live: ClassifierModel, candidate: ClassifierModel | F64, held_out: TrainingSet
) -> ReplayResult:
    """The candidate (a model, or its scores on ``held_out`` from models that never saw them)
    against the live model on ``held_out``."""
    light_ok = held_out.weak >= held_out.strong  # a_worse is the only verdict light fails
    heavy_ok = held_out.strong >= held_out.weak
    live_area = _area(scores_of(live, held_out), light_ok, heavy_ok)
    scores = scores_of(candidate, held_out) if isinstance(candidate, ClassifierModel) else candidate
    candidate_area = _area(scores, light_ok, heavy_ok)
    accepted = len(held_out.rows) > 0 and candidate_area >= live_area
    return ReplayResult(len(held_out.rows), live_area, candidate_area, accepted)


def _area(scores: F64, light_ok: npt.NDArray[np.bool_], heavy_ok: npt.NDArray[np.bool_]) -> float:
    """Mean over k = 0..n of the share answered well when the k highest scores go heavy."""
    n = len(scores)
    if n == 0:
        return 0.0
    order = np.argsort(-scores, kind="stable")
    gain = heavy_ok[order].astype(np.float64) - light_ok[order].astype(np.float64)
    quality = float(light_ok.sum()) + np.concatenate([[0.0], np.cumsum(gain)])
    return float(quality.mean() / n)


@dataclass(frozen=True, slots=True)
class Candidate:
    model: ClassifierModel  # with its replay's figures in ``info["replay"]``
    replay: ReplayResult
    trained: int  # the rows it was fitted on (cross-fitted: every row, by all but one model)
    held_out: TrainingSet  # the rows replayed: the latest (cross-fitted: all of them)
    held_out_scores: F64  # the candidate's scores there, each from a model that never saw it


Fit = Callable[[TrainingSet, ClassifierModel, float], ClassifierModel]


def _fit(data: TrainingSet, prior: ClassifierModel, l2: float) -> ClassifierModel:
    return fit_with_prior(data, prior, l2=l2)


def train_candidate(
    data: TrainingSet,
    prior: ClassifierModel,
    *,
    holdout: float,
    l2: float,
    fit: Fit | None = None,
    folds: int = 0,
) -> Candidate:
    """The oldest ``1 - holdout`` of ``data`` (oldest first) fit a candidate pulled towards
    ``prior``; the rest replays both (``router train --from-log`` and the automatic update).
    ``folds`` >= 2: cross-fitted instead (module docstring), ``holdout`` unused.  ``fit``:
    ``fit_with_prior`` unless given (a test passes a deliberately bad one)."""
    fit = fit or _fit
    if folds >= 2:
        return _cross_fitted(data, prior, l2, fit, folds)
    n = len(data.rows)
    first = np.zeros(n, dtype=bool)
    first[: int(n * (1 - holdout))] = True
    held_out = data.subset(~first)
    candidate = fit(data.subset(first), prior, l2)
    scores = np.asarray(scores_of(candidate, held_out), dtype=np.float64)
    return _candidate(candidate, replay(prior, scores, held_out), int(first.sum()), held_out,
                      scores)  # fmt: skip


def _cross_fitted(
    data: TrainingSet, prior: ClassifierModel, l2: float, fit: Fit, folds: int
) -> Candidate:
    n = len(data.rows)
    if n < folds:
        raise RouterModelError(f"{n} audits cannot make {folds} folds")
    fold = np.arange(n) % folds  # interleaved: each fold spans the whole time range
    scores = np.zeros(n, dtype=np.float64)
    models = []
    for f in range(folds):
        model = fit(data.subset(fold != f), prior, l2)
        scores[fold == f] = scores_of(model, data.subset(fold == f))
        models.append(model)
    mean = _mean_model(models, dict(models[0].info, cross_fitted={"folds": folds}))
    result = dataclasses.replace(replay(prior, scores, data), folds=folds)
    return _candidate(mean, result, n, data, scores)


def _mean_model(models: Sequence[ClassifierModel], info: dict[str, object]) -> ClassifierModel:
    """One linear model whose logit is the mean of ``models``' logits."""
    heads = [m.head for m in models]
    first = models[0]
    same_scale = all(
        np.array_equal(m.feature_mean, first.feature_mean)
        and np.array_equal(m.feature_std, first.feature_std)
        for m in models
    )
    if not same_scale or not all(isinstance(h, LinearHead) for h in heads):
        raise RouterModelError("cross-fitting averages linear models of one standardisation")
    linear = [h for h in heads if isinstance(h, LinearHead)]
    head = LinearHead(
        np.mean([h.embed_weights for h in linear], axis=0).astype(np.float32),
        np.mean([h.feature_weights for h in linear], axis=0).astype(np.float32),
        float(np.mean([h.bias for h in linear])),
    )
    return ClassifierModel(first.namespace, head, first.feature_mean, first.feature_std, info)


def _candidate(
    candidate: ClassifierModel, result: ReplayResult, trained: int, held_out: TrainingSet,
    scores: F64,
) -> Candidate:  # fmt: skip
    figures = {"labels": result.labels, "live": result.live_area,
               "candidate": result.candidate_area, "folds": result.folds}  # fmt: skip
    info = dict(candidate.info, replay=figures)
    model = ClassifierModel(candidate.namespace, candidate.head, candidate.feature_mean,
                            candidate.feature_std, info)  # fmt: skip
    return Candidate(model, result, trained, held_out, scores)
