"""What the classifier computes from a prompt's embedding and standardised text features.

Two heads, one logit each:

* ``LinearHead``: one weight vector, the logistic model fitted to the soft target
  ``0.5 + 0.5 * (s - w)`` (``routing/training.py``).  Formats 1 and 2.
* ``OutcomeHeads`` (format 3): a prompt has four outcomes, *light better*, *both wrong*, *both
  right* and *heavy better*, and a softmax model per source gives their probabilities.  What a
  heavy call buys is ``P(heavy better) - P(light better)``, the expected gain; each source's
  gain is divided by its spread over the training rows, the sources are averaged (weights
  proportional to the square root of their rows) and one scale and shift (the scale fitted
  within sources) turn the average into a logit.

Why outcomes rather than one logistic model of the soft target: the gain is not monotone in how
hard a question is.  An easy question is a tie (both right), a hopeless one too (both wrong), and
the heavy model pays off in between.  A logistic model is monotone along every direction of its
features; with "both right" and "both wrong" as outcomes of their own, a softmax model can give
"heavy better" the middle of a direction whose ends are the two kinds of tie.  Measured
(embedding + text features, APGR): better on MMLU 5-fold by prompt (0.640 against 0.627), level
on benchmarks left out of training (leave-one-source-out mean 0.538 against 0.542), worse in
distribution over the five-file training mix (0.539 against 0.569).  So it is opt-in
(``--target outcomes``); figures in docs/router.md.

Graded scores (judge scores 1-10) split a row between the outcomes: ``clip((s - w) / scale)``
of it is "heavy better" (or "light better" when negative), the rest a tie, shared between "both
right" and "both wrong" by where the two scores' mean sits in the source's range; the expected
gain is the soft target's own ``(s - w) / scale``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hybrid_gateway.routing.lbfgs import minimise

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
OUTCOMES = ("light_better", "both_wrong", "both_right", "heavy_better")


@dataclass(frozen=True, slots=True)
class LinearHead:
    embed_weights: F32  # (dim,)
    feature_weights: F32  # (len(FEATURE_NAMES),), on standardised features
    bias: float

    @property
    def dim(self) -> int:
        return int(self.embed_weights.shape[0])

    def logit_many(self, vectors: F64, feats: F64) -> F64:
        z = vectors @ self.embed_weights + feats @ self.feature_weights + self.bias
        return np.asarray(z, dtype=np.float64)


@dataclass(frozen=True, slots=True)
class OutcomeHeads:
    weights: F32  # (heads, 4, dim + features + 1): one softmax model per source, bias last
    mix: F32  # (heads,): weight of each head's gain in the average, spread included
    scale: float  # logit = scale * average gain + shift
    shift: float
    features: int  # how many text features follow the embedding in the design row

    @property
    def dim(self) -> int:
        return int(self.weights.shape[2]) - self.features - 1

    def gain_many(self, vectors: F64, feats: F64) -> F64:
        """``P(heavy better) - P(light better)`` of every head, ``(n, heads)``."""
        design = np.hstack([vectors, feats, np.ones((len(vectors), 1))])
        z = np.einsum("nd,hkd->nhk", design, self.weights.astype(np.float64))
        z -= z.max(axis=2, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=2, keepdims=True)
        return np.asarray(p[:, :, 3] - p[:, :, 0], dtype=np.float64)

    def logit_many(self, vectors: F64, feats: F64) -> F64:
        average = self.gain_many(vectors, feats) @ self.mix.astype(np.float64)
        return np.asarray(self.scale * average + self.shift, dtype=np.float64)


def outcome_shares(gain: F64, level: F64) -> F64:
    """Each row's share of the four ``OUTCOMES`` from its gain in [-1, 1] and its level in
    [0, 1] (the two scores' mean on the source's range: 1 both right, 0 both wrong)."""
    g = np.clip(gain, -1.0, 1.0)
    tie = 1.0 - np.abs(g)
    up = np.clip(level, 0.0, 1.0)
    return np.column_stack([np.clip(-g, 0.0, 1.0), tie * (1.0 - up), tie * up, np.clip(g, 0, 1)])


def fit_outcome_head(
    design: F64, shares: F64, row_weights: F64, l2: float, iterations: int = 300
) -> F64:
    """Softmax regression of the outcome shares on ``design`` (a column of ones last), ridge on
    every weight but the bias: ``(4, width)``."""
    width, k = design.shape[1], shares.shape[1]
    penalty = np.full(width, l2)
    penalty[-1] = 0.0

    def objective(flat: F64) -> tuple[float, F64]:
        w = flat.reshape(k, width)
        z = design @ w.T
        top = z.max(axis=1, keepdims=True)
        log_norm = top[:, 0] + np.log(np.exp(z - top).sum(axis=1))
        loss = float(row_weights @ (log_norm - (shares * z).sum(axis=1)))
        loss += 0.5 * float(((w * w) @ penalty).sum())
        p = np.exp(z - log_norm[:, None])
        grad = (row_weights[:, None] * (p - shares)).T @ design + w * penalty
        return loss, grad.reshape(-1)

    return minimise(objective, np.zeros(k * width), iterations=iterations).reshape(k, width)
