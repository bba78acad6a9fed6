"""Train the pair verifier (``verifier.py``) with numpy: a tiny MLP or a logistic regression.

Full-batch Adam on the logistic loss with L2 on the weights, and early stopping on an inner
split of the training pairs (``holdout``): the weights kept are those of the epoch with the
lowest loss on pairs the optimiser never saw, and of the weight decay (from a small grid) with
the lowest such loss.  Labelled pair sets are small (a few thousand
pairs) and the features wide (~780), so both brakes matter; without them the model learns the
training file's quirks and its scores on new pairs are overconfident, which is exactly what
a precision bound cannot afford.

Deterministic for a given seed; a few seconds on one core for ten thousand pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from hybrid_gateway.cache.semantic.calibrate import Bools
from hybrid_gateway.cache.semantic.verifier import Floats, PairVerifier


@dataclass(frozen=True, slots=True)
class TrainSettings:
    hidden: int = 0  # 0: logistic regression; n: one ReLU layer of n units
    # weight decay candidates: each is trained, the one with the lowest inner-split loss kept
    l2: tuple[float, ...] = (1e-3, 1e-2, 1e-1)
    learning_rate: float = 3e-3
    max_epochs: int = 1500
    patience: int = 100  # epochs without a better inner-split loss before stopping
    holdout: float = 0.2  # share of the training pairs used for early stopping
    seed: int = 7


DEFAULT_TRAINING = TrainSettings()


@dataclass(frozen=True, slots=True)
class TrainResult:
    model: PairVerifier
    epochs: int  # the epoch whose weights were kept
    holdout_loss: float
    l2: float  # the weight decay chosen on the inner split


def _loss(p: Floats, y: Floats) -> float:
    eps = 1e-9
    return float(-np.mean(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps)))


def train_verifier(
    features: Floats,
    labels: Bools,
    *,
    namespace: str,
    settings: TrainSettings = DEFAULT_TRAINING,
    trained_on: str = "",
    trained_pairs: frozenset[bytes] | None = None,
) -> TrainResult:
    """Fit on ``features``/``labels``; stop early and pick the weight decay on an inner split.

    ``trained_pairs`` (the pairs' ``pair_digest``) goes into the model file, so an evaluation
    can leave those pairs out."""
    results = [
        _train_one(features, labels, namespace, settings, l2, trained_on) for l2 in settings.l2
    ]
    best = min(results, key=lambda r: r.holdout_loss)
    if trained_pairs is None:
        return best
    return replace(best, model=replace(best.model, trained_pairs=trained_pairs))


def _train_one(
    features: Floats,
    labels: Bools,
    namespace: str,
    settings: TrainSettings,
    l2: float,
    trained_on: str,
) -> TrainResult:
    rng = np.random.default_rng(settings.seed)
    n, d = features.shape
    order = rng.permutation(n)
    n_hold = max(1, int(n * settings.holdout)) if n > 4 else 0
    hold, fit = order[:n_hold], order[n_hold:]
    mean = features[fit].mean(axis=0)
    scale = features[fit].std(axis=0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    x = (features - mean) / scale
    y = labels.astype(np.float64)
    h = settings.hidden
    params = _init(rng, d, h)
    moments = [(np.zeros_like(p), np.zeros_like(p)) for p in params]
    best = (np.inf, 0, [p.copy() for p in params])
    for epoch in range(1, settings.max_epochs + 1):
        grads = _gradients(params, x[fit], y[fit], l2, h)
        for i, (p, g) in enumerate(zip(params, grads, strict=True)):
            m, v = moments[i]
            m[...] = 0.9 * m + 0.1 * g
            v[...] = 0.999 * v + 0.001 * g * g
            m_hat, v_hat = m / (1 - 0.9**epoch), v / (1 - 0.999**epoch)
            p -= settings.learning_rate * m_hat / (np.sqrt(v_hat) + 1e-8)
        monitor = hold if n_hold else fit
        loss = _loss(_forward(params, x[monitor], h)[0], y[monitor])
        if loss < best[0] - 1e-6:
            best = (loss, epoch, [p.copy() for p in params])
        elif epoch - best[1] >= settings.patience:
            break
    w1, b1, w2, b2 = best[2]
    model = PairVerifier(namespace=namespace, mean=mean, scale=scale, w1=w1, b1=b1,
                         w2=w2, b2=float(b2[0]), trained_on=trained_on)  # fmt: skip
    return TrainResult(model, best[1], best[0], l2)


def _init(rng: np.random.Generator, d: int, h: int) -> list[Floats]:
    if h == 0:
        return [np.zeros((0, 0)), np.zeros(0), np.zeros(d), np.zeros(1)]
    w1 = rng.normal(0.0, np.sqrt(2.0 / d), size=(d, h))
    return [w1, np.zeros(h), rng.normal(0.0, np.sqrt(1.0 / h), size=h), np.zeros(1)]


def _forward(params: list[Floats], x: Floats, h: int) -> tuple[Floats, Floats]:
    w1, b1, w2, b2 = params
    hidden = np.maximum(x @ w1 + b1, 0.0) if h else x
    logits = np.clip(hidden @ w2 + b2[0], -40.0, 40.0)
    return 1.0 / (1.0 + np.exp(-logits)), hidden


def _gradients(params: list[Floats], x: Floats, y: Floats, l2: float, h: int) -> list[Floats]:
    w1, _, w2, _ = params
    p, hidden = _forward(params, x, h)
    delta = (p - y) / len(y)  # d loss / d logit
    g_w2 = hidden.T @ delta + l2 * w2
    g_b2 = np.array([delta.sum()])
    if not h:
        return [np.zeros((0, 0)), np.zeros(0), g_w2, g_b2]
    back = np.outer(delta, w2) * (hidden > 0)
    return [x.T @ back + l2 * w1, back.sum(axis=0), g_w2, g_b2]
