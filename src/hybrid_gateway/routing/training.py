"""Fitting the classifier with numpy alone: L2-regularised logistic regression by Newton steps.

The target.  For a prompt with weak score ``w`` and strong score ``s`` (0/1 or graded, on a
scale of ``scale`` points) the soft label is ``t = 0.5 + 0.5 * clip((s - w) / scale, -1, 1)``:
1 when only the heavy model gets it right, 0 when only the light one does, 0.5 when they tie
(both right or both wrong: a heavy call buys nothing).  A logistic model fitted to soft labels
estimates E[t | prompt], which orders prompts exactly by the expected gain of a heavy call, the
ordering APGR and the calibration curve reward.  Explicit ``simple``/``complex`` labels arrive as
``w = 1 - complex, s = 1`` and so become t = 0.5 / 1: the same ordering.

Several sources (files) are combined per source by default (``per_source``): one model is fitted
on each source's rows alone, each model's logit is divided by its spread over all the training
rows, and the models are averaged with weights proportional to the square root of each source's
size; a one-dimensional logistic fit (scale and shift, the scale fitted within sources) then
maps the average back onto the target.  The result is one linear model of the same shape.  A
model fitted on one benchmark can only learn what makes a question harder *within* that
benchmark, never which benchmark a question comes from, and no source's direction drowns the
others: on a benchmark left out of training this ranks better than one model fitted on all rows
together (leave-one-source-out mean APGR 0.542 vs 0.511; see docs/router.md).  With
``per_source`` off (or with n-grams, which are always fitted jointly) one model is fitted on
all rows, each source weighted in proportion to the square root of its size.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from hybrid_gateway.routing.classifier import ClassifierModel
from hybrid_gateway.routing.features import feature_matrix
from hybrid_gateway.routing.heads import LinearHead, OutcomeHeads, fit_outcome_head, outcome_shares
from hybrid_gateway.routing.lbfgs import minimise
from hybrid_gateway.routing.memory import NeighbourMemory
from hybrid_gateway.routing.ngrams import (
    NgramWeights,
    SparseRows,
    inverse_document_frequency,
    term_rows,
)
from hybrid_gateway.routing.outcomes import OutcomeRow

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class TrainingSet:
    rows: tuple[OutcomeRow, ...]
    vectors: F32  # (n, dim) embeddings of the prompts
    feats: F32  # (n, len(FEATURE_NAMES)) raw text features

    @classmethod
    def build(cls, rows: Sequence[OutcomeRow], vectors: F32) -> TrainingSet:
        return cls(tuple(rows), vectors, feature_matrix([r.prompt for r in rows]))

    @property
    def prompts(self) -> list[str]:
        return [r.prompt for r in self.rows]

    @property
    def weak(self) -> F64:
        return np.array([r.weak for r in self.rows])

    @property
    def strong(self) -> F64:
        return np.array([r.strong for r in self.rows])

    @property
    def sources(self) -> npt.NDArray[np.str_]:
        return np.array([r.source for r in self.rows])

    def subset(self, mask: npt.NDArray[np.bool_]) -> TrainingSet:
        rows = tuple(r for r, keep in zip(self.rows, mask, strict=True) if keep)
        return TrainingSet(rows, self.vectors[mask], self.feats[mask])


@dataclass(frozen=True, slots=True)
class FitSettings:
    l2: float = 3.0  # ridge penalty on the weights (not the bias)
    iterations: int = 25
    # Neighbour memory (routing/memory.py): principal components kept, neighbours averaged,
    # weight of its logit next to the linear one.  Off by default (memory_k = 0): it helps on
    # questions like the training ones (MMLU 5-fold APGR 0.624 -> 0.643 with k=100) and hurts
    # on unseen kinds (leave-one-benchmark-out mean 0.51 -> 0.48); see docs/router.md.
    memory_dim: int = 128
    memory_k: int = 0
    memory_alpha: float = 2.0
    # Hashed character n-grams (routing/ngrams.py): 2**ngram_bits buckets (0 = off), n-grams of
    # 1..ngram_max_n characters, their own ridge penalty; fitted jointly by L-BFGS.
    ngram_bits: int = 0
    ngram_max_n: int = 3
    ngram_l2: float = 3.0
    ngram_iterations: int = 200
    # One model per source, averaged (see the module docstring); ignored with n-grams.
    per_source: bool = True
    # "soft": one logistic model of the soft target; "outcomes": softmax models of light
    # better / both wrong / both right / heavy better, scored by the expected gain
    # (routing/heads.py).
    target: str = "soft"


def score_scale(weak: F64, strong: F64) -> float:
    """1 for 0/1 outcomes; for graded ones (judge scores 1-10) a quarter of the range."""
    both = np.concatenate([weak, strong])
    if np.all(np.isin(both, (0.0, 1.0))):
        return 1.0
    return max(float(both.max() - both.min()) / 4, 1e-9)


def soft_targets(data: TrainingSet) -> F64:
    """The soft label per row, each source on its own score scale (see the module docstring)."""
    weak, strong = data.weak, data.strong
    out = np.empty(len(data.rows))
    sources = data.sources
    for source in set(sources.tolist()):
        mask = sources == source
        scale = score_scale(weak[mask], strong[mask])
        out[mask] = 0.5 + 0.5 * np.clip((strong[mask] - weak[mask]) / scale, -1, 1)
    return out


def outcome_table(data: TrainingSet, targets: F64) -> F64:
    """Each row's share of the four outcomes of ``routing/heads.py``: its gain from its soft
    target (``soft_targets``), its level from where the two scores' mean sits in its source's
    range."""
    weak, strong = data.weak, data.strong
    level = np.empty(len(data.rows))
    sources = data.sources
    for source in set(sources.tolist()):
        mask = sources == source
        w, s = weak[mask], strong[mask]
        low, high = float(min(w.min(), s.min())), float(max(w.max(), s.max()))
        level[mask] = ((w + s) / 2 - low) / max(high - low, 1e-9)
    return outcome_shares(2.0 * targets - 1.0, level)


def source_weights(data: TrainingSet) -> F64:
    """Per-row weights: each source's total is proportional to sqrt(its rows); mean 1."""
    counts = Counter(r.source for r in data.rows)
    w = np.array([np.sqrt(counts[r.source]) / counts[r.source] for r in data.rows])
    return np.asarray(w * len(w) / w.sum(), dtype=np.float64)


def fit(
    data: TrainingSet,
    namespace: str,
    settings: FitSettings = FitSettings(),
    terms: SparseRows | None = None,
) -> ClassifierModel:
    """Fit on ``data``; ``terms``: its n-gram term rows when already computed (cross-validation)."""
    mean = data.feats.mean(axis=0)
    std = data.feats.std(axis=0) + 1e-6
    x = np.hstack(
        [data.vectors.astype(np.float64), (data.feats - mean) / std, np.ones((len(data.rows), 1))]
    )
    targets = soft_targets(data)
    weights = source_weights(data)
    per_source = settings.per_source and settings.ngram_bits == 0
    ngrams = None
    dim = data.vectors.shape[1]
    head: LinearHead | OutcomeHeads
    if settings.target == "outcomes":
        if settings.ngram_bits > 0:
            raise ValueError("character n-grams need the soft target (target='soft')")
        head = _outcome_heads(data, x, targets, weights, settings)
    elif settings.target == "soft":
        if per_source:
            coef = _per_source(data, x, targets, weights, settings)
        else:
            coef = _newton(x, targets, weights, settings)
        if settings.ngram_bits > 0:
            if terms is None:
                terms = term_rows(data.prompts, settings.ngram_bits, settings.ngram_max_n)
            coef, ngrams = _fit_ngrams(x, terms, targets, weights, coef, settings)
        head = LinearHead(coef[:dim].astype(np.float32), coef[dim:-1].astype(np.float32),
                          float(coef[-1]))  # fmt: skip
    else:
        raise ValueError(f"target must be 'soft' or 'outcomes', got {settings.target!r}")
    memory = None
    if settings.memory_k > 0:
        memory = NeighbourMemory.build(
            data.vectors, targets, dim=settings.memory_dim, k=settings.memory_k,
            alpha=settings.memory_alpha,
        )  # fmt: skip
    sources = Counter(r.source for r in data.rows)
    return ClassifierModel(
        namespace=namespace,
        head=head,
        feature_mean=mean.astype(np.float32),
        feature_std=std.astype(np.float32),
        info={"rows": len(data.rows), "sources": dict(sorted(sources.items())),
              "target": _TARGETS[settings.target], "l2": settings.l2,
              "combine": "per-source models, sqrt(rows) weights" if per_source else "pooled",
              "memory": None if memory is None else {"dim": settings.memory_dim,
                        "k": settings.memory_k, "alpha": settings.memory_alpha},
              "ngrams": None if ngrams is None else {"bits": settings.ngram_bits,
                        "max_n": settings.ngram_max_n, "l2": settings.ngram_l2}},
        memory=memory,
        ngrams=ngrams,
    )  # fmt: skip


def _fit_ngrams(
    x: F64, terms: SparseRows, t: F64, w: F64, start: F64, settings: FitSettings
) -> tuple[F64, NgramWeights]:
    """Dense and n-gram weights together, from the dense-only fit ``start``; L-BFGS."""
    idf = inverse_document_frequency(terms)
    tfidf = terms.scaled(idf)
    d = x.shape[1]
    penalty = np.concatenate([np.full(d - 1, settings.l2), [0.0]])

    def objective(coef: F64) -> tuple[float, F64]:
        a, b = coef[:d], coef[d:]
        z = x @ a + tfidf.dot(b)
        # log(1 + e^z) - t z, the soft-label cross-entropy, stable for large |z|
        loss = float(w @ (np.logaddexp(0.0, z) - t * z))
        loss += 0.5 * float(penalty @ (a * a)) + 0.5 * settings.ngram_l2 * float(b @ b)
        g = w * (1.0 / (1.0 + np.exp(-z)) - t)
        grad = np.concatenate([x.T @ g + penalty * a, tfidf.t_dot(g) + settings.ngram_l2 * b])
        return loss, grad

    coef = minimise(
        objective,
        np.concatenate([start, np.zeros(terms.width)]),
        iterations=settings.ngram_iterations,
    )
    ngrams = NgramWeights(idf.astype(np.float32), coef[d:].astype(np.float32), settings.ngram_max_n)
    return coef[:d], ngrams


_TARGETS = {
    "soft": "soft: 0.5 + 0.5*clip((strong-weak)/scale)",
    "outcomes": "outcomes: P(heavy better) - P(light better)",
}
# Fits one source's model on its own design rows (mask) and returns weights whose last axis
# runs over the design columns [embedding, features standardised on the source's rows, 1].
SourceFit = Callable[[F64, npt.NDArray[np.bool_]], F64]


def _source_parts(data: TrainingSet, fit_one: SourceFit) -> Iterator[tuple[F64, float]]:
    """Each source's fitted weights, moved onto ``fit``'s overall standardisation, with the
    square root of its rows (the weight of its vote)."""
    mean, std = data.feats.mean(axis=0), data.feats.std(axis=0) + 1e-6
    vectors = data.vectors.astype(np.float64)
    ones = np.ones((len(data.rows), 1))
    sources = data.sources
    dim = vectors.shape[1]
    for name in sorted(set(sources.tolist())):
        mask = sources == name
        own_mean = data.feats[mask].mean(axis=0)
        own_std = data.feats[mask].std(axis=0) + 1e-6
        coef = fit_one(np.hstack([vectors, (data.feats - own_mean) / own_std, ones]), mask)
        # the same function of the prompt on the overall standardisation (mean, std)
        moved = coef.copy()
        moved[..., dim:-1] = coef[..., dim:-1] * std / own_std
        moved[..., -1] = coef[..., -1] + coef[..., dim:-1] @ ((mean - own_mean) / own_std)
        yield moved, float(np.sqrt(mask.sum()))


def _per_source(data: TrainingSet, x: F64, t: F64, w: F64, settings: FitSettings) -> F64:
    """One model per source (its text features standardised on its own rows), each logit scaled
    to unit spread over all rows, sqrt(size)-weighted; returned on ``fit``'s overall columns
    (``x``: the design rows on them)."""

    def fit_one(own: F64, mask: npt.NDArray[np.bool_]) -> F64:
        return _newton(own[mask], t[mask], np.ones(int(mask.sum())), settings)

    combined = np.zeros(x.shape[1])
    total = 0.0
    for coef, weight in _source_parts(data, fit_one):
        spread = float((x @ coef).std())
        if spread < 1e-9:  # a source whose rows all tie: nothing to learn from it
            continue
        combined += weight * coef / spread
        total += weight
    if total == 0.0:
        return _newton(x, t, w, settings)
    combined /= total
    scale, shift = _scale_shift_within(x @ combined, t, w, data, settings)
    out = scale * combined
    out[-1] += shift
    return np.asarray(out, dtype=np.float64)


def _outcome_heads(
    data: TrainingSet, x: F64, t: F64, w: F64, settings: FitSettings
) -> OutcomeHeads:
    """Softmax outcome models (routing/heads.py), one per source or one over all rows, each
    gain divided by its spread over the training rows, averaged sqrt(size)-weighted."""
    shares = outcome_table(data, t)
    if settings.per_source:

        def fit_one(own: F64, mask: npt.NDArray[np.bool_]) -> F64:
            return fit_outcome_head(own[mask], shares[mask], np.ones(int(mask.sum())),
                                    settings.l2)  # fmt: skip

        parts = list(_source_parts(data, fit_one))
    else:
        parts = [(fit_outcome_head(x, shares, w, settings.l2), 1.0)]
    stacked = np.stack([coef for coef, _ in parts]).astype(np.float32)
    dim = data.vectors.shape[1]
    features = data.feats.shape[1]
    unmixed = OutcomeHeads(stacked, np.ones(len(parts), np.float32), 1.0, 0.0, features)
    gains = unmixed.gain_many(x[:, :dim], x[:, dim:-1])
    spread = gains.std(axis=0)
    votes = spread > 1e-9  # a source whose rows all tie has nothing to say
    if not votes.any():
        if settings.per_source and len(parts) > 1:
            return _outcome_heads(data, x, t, w, replace(settings, per_source=False))
        mean_t = float(np.clip((w @ t) / w.sum(), 1e-6, 1 - 1e-6))
        return OutcomeHeads(stacked, np.zeros(len(parts), np.float32), 0.0,
                            float(np.log(mean_t / (1 - mean_t))), features)  # fmt: skip
    weight = np.array([wt for _, wt in parts])
    mix = np.where(votes, weight / np.maximum(spread, 1e-9), 0.0) / float(weight[votes].sum())
    scale, shift = _scale_shift_within(gains @ mix, t, w, data, settings)
    return OutcomeHeads(stacked, mix.astype(np.float32), scale, shift, features)


def _scale_shift_within(
    z: F64, t: F64, w: F64, data: TrainingSet, settings: FitSettings
) -> tuple[float, float]:
    """The logistic map from the averaged per-source score to P(complex): the scale fitted
    *within* sources (one intercept per source), the shift their weighted mean.  The averaged
    scores of several sources' models differ between sources by offsets that have nothing to
    do with the targets, so one pooled fit underrates the scale (the shipped model's P(complex)
    spanned only 0.55-0.63 on its training rows) and can even read the order backwards (seen:
    a negative scale for the outcome models when ARC was held out, APGR 0.56 -> 0.44).  A
    source whose targets do not vary (a file of "complex" examples only) says nothing about the
    scale and would drive its own intercept to infinity, so it is left out; with no source left,
    this is the pooled fit.  With one source it is the plain logistic fit."""
    sources = data.sources
    names = [n for n in sorted(set(sources.tolist())) if np.ptp(t[sources == n]) > 1e-9]
    plain = FitSettings(l2=0.0, iterations=settings.iterations)
    if not names:
        coef = _newton(np.column_stack([z, np.ones(len(z))]), t, w, plain)
        return float(coef[0]), float(coef[1])
    keep = np.isin(sources, names)
    dummies = np.column_stack([sources[keep] == name for name in names]).astype(np.float64)
    coef = _newton(np.column_stack([z[keep], dummies]), t[keep], w[keep], plain)
    share = (w[keep] @ dummies) / w[keep].sum()
    return float(coef[0]), float(share @ coef[1:])


def _newton(x: F64, t: F64, w: F64, settings: FitSettings) -> F64:
    d = x.shape[1]
    penalty = np.full(d, settings.l2)
    penalty[-1] = 0.0  # the bias is not shrunk
    coef = np.zeros(d)
    for _ in range(settings.iterations):
        p = 1.0 / (1.0 + np.exp(-(x @ coef)))
        grad = x.T @ (w * (p - t)) + penalty * coef
        hess = (x * (w * p * (1 - p))[:, None]).T @ x + np.diag(penalty)
        step = np.linalg.solve(hess, grad)
        coef -= step
        if float(np.abs(step).max()) < 1e-6:
            break
    return coef


def prompt_folds(prompts: Sequence[str], k: int, seed: int = 0) -> npt.NDArray[np.int64]:
    """A fold per row from a hash of its prompt: a repeated prompt never straddles two folds."""
    salt = str(seed).encode()
    return np.array(
        [int.from_bytes(hashlib.blake2b(p.encode() + salt, digest_size=8).digest()) % k
         for p in prompts]
    )  # fmt: skip


def out_of_fold_scores(
    data: TrainingSet, namespace: str, k: int = 5, settings: FitSettings = FitSettings()
) -> F64:
    """P(complex) for every row from a model that never saw that row's prompt."""
    folds = prompt_folds(data.prompts, k)
    terms = None
    if settings.ngram_bits > 0:  # the n-grams of every prompt, once for all the folds
        terms = term_rows(data.prompts, settings.ngram_bits, settings.ngram_max_n)
    out = np.empty(len(data.rows))
    for fold in range(k):
        test = folds == fold
        train_terms = None if terms is None else terms.subset(~test)
        model = fit(data.subset(~test), namespace, settings, train_terms)
        out[test] = scores_of(model, data.subset(test))
    return out


def scores_of(model: ClassifierModel, data: TrainingSet) -> F64:
    """P(complex) of every row of ``data``."""
    return model.p_complex_many(data.vectors, data.feats, data.prompts)
