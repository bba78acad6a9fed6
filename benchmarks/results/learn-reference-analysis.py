"""How much the reference run's router figures can mean (docs/learning.md, issue 23).

    .venv/bin/python benchmarks/results/learn-reference-analysis.py RUN_FOLDER UNSEEN

RUN_FOLDER is ``<out>/<name>`` of a ``bench learn`` run (hard.jsonl, embeddings.sqlite3,
router/), UNSEEN its ``--unseen``.  Prints, from the run's own files (no embedding beyond the
run's cache):

1. the replay gate of each checkpoint, recomputed, with a bootstrap of the candidate - live
   area over the held-out audits (how many of them decide anything: a_worse / b_worse);
2. learned - shipped APGR on the unseen part, with a paired bootstrap 95 % interval;
3. the same labels fitted with other prior strengths (the embedding weights' pull; the hand
   features frozen), scored on the unseen part: does a looser prior help?
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from hybrid_gateway.accounting.log_source import config_source
from hybrid_gateway.config import load_config
from hybrid_gateway.learning.labels import read_labels
from hybrid_gateway.learning.router_fit import _area, outcome_rows
from hybrid_gateway.routing.build import default_model_path
from hybrid_gateway.routing.classifier import ClassifierModel, load_model
from hybrid_gateway.routing.dataset import bundled_embedder, embed_rows
from hybrid_gateway.routing.evaluation import router_quality
from hybrid_gateway.routing.heads import LinearHead
from hybrid_gateway.routing.outcomes import OutcomeRow
from hybrid_gateway.routing.training import TrainingSet, scores_of, soft_targets
from hybrid_gateway.tools.learncurve.scoring import split_unseen
from hybrid_gateway.tools.workload.schema import last_user_text, read_workload

DRAWS = 1000


def fit(
    train: TrainingSet, prior: ClassifierModel, l2_embed: float, l2_feats: float
) -> ClassifierModel:
    head = prior.head
    assert isinstance(head, LinearHead)
    st = (train.feats - prior.feature_mean) / prior.feature_std
    x = np.hstack([train.vectors.astype(float), st.astype(float), np.ones((len(train.rows), 1))])
    start = np.concatenate([head.embed_weights, head.feature_weights, [head.bias]]).astype(float)
    pen = np.concatenate([np.full(head.dim, l2_embed), np.full(st.shape[1], l2_feats), [0.0]])
    t, c = soft_targets(train), start.copy()
    for _ in range(25):
        p = 1 / (1 + np.exp(-(x @ c)))
        grad = x.T @ (p - t) + pen * (c - start)
        hess = (x * (p * (1 - p))[:, None]).T @ x + np.diag(pen) + 1e-9 * np.eye(len(c))
        step = np.linalg.solve(hess, grad)
        c -= step
        if np.abs(step).max() < 1e-6:
            break
    fitted = LinearHead(c[: head.dim].astype(np.float32), c[head.dim : -1].astype(np.float32),
                        float(c[-1]))  # fmt: skip
    return ClassifierModel(prior.namespace, fitted, prior.feature_mean, prior.feature_std, {})


def main(run: Path, unseen_n: int) -> None:
    rng = np.random.default_rng(0)
    cache, embedder = run / "embeddings.sqlite3", bundled_embedder()
    config_path = run / "router" / "gateway.yaml"
    with config_source(load_config(config_path), config_path) as source:
        rows = outcome_rows(read_labels(source, 0, time.time() + 1))
    data = embed_rows(rows, embedder, cache)
    prior = load_model(default_model_path(), None)
    report = json.loads((run.parent / f"{run.name}.json").read_text())
    counts = [p["labels"] for p in report["router"]["checkpoints"]]
    print("1. replay gate (held-out audits; bootstrap of candidate - live area)")
    for i, total in enumerate(counts):
        held = data.subset(np.array([int(total * 0.7) <= j < total for j in range(len(rows))]))
        light_ok, heavy_ok = held.weak >= held.strong, held.strong >= held.weak
        live = np.asarray(scores_of(prior, held), float)
        cand = np.asarray(scores_of(load_model(run / "router" / f"candidate-{i}.npz", None),
                                    held), float)  # fmt: skip
        m = len(held.rows)
        diffs = []
        for _ in range(DRAWS):
            k = rng.integers(0, m, m)
            diffs.append(_area(cand[k], light_ok[k], heavy_ok[k])
                         - _area(live[k], light_ok[k], heavy_ok[k]))  # fmt: skip
        d = np.array(diffs)
        print(f"  @{total}: {m} held out (a_worse {int((~light_ok).sum())}, b_worse "
              f"{int((~heavy_ok).sum())}); area {_area(cand, light_ok, heavy_ok):.4f} vs live "
              f"{_area(live, light_ok, heavy_ok):.4f}; diff 95 % [{np.quantile(d, .025):+.4f}, "
              f"{np.quantile(d, .975):+.4f}], P(diff >= 0) {np.mean(d >= 0):.2f}; score "
              f"correlation with live {np.corrcoef(live, cand)[0, 1]:+.2f}")  # fmt: skip
    _, unseen = split_unseen(read_workload(run / "hard.jsonl"), unseen_n)
    urows = [OutcomeRow(last_user_text(i.messages), float(i.labels.light_ok),
                        float(i.labels.heavy_ok), i.labels.category, i.labels.source)
             for i in unseen]  # fmt: skip
    u = embed_rows(urows, embedder, cache)
    w, s, n = u.weak, u.strong, len(urows)
    base = np.asarray(scores_of(prior, u), float)
    draws = [rng.integers(0, n, n) for _ in range(DRAWS)]

    def apgr(scores: np.ndarray) -> float:
        return router_quality(scores, w, s).apgr

    print(f"2. unseen part: {n} items, {int(((w == 0) & (s == 1)).sum())} only heavy right, "
          f"{int(((w == 1) & (s == 0)).sum())} only light right; shipped APGR "
          f"{apgr(base):.4f}")  # fmt: skip
    for i, total in enumerate(counts):
        c = np.asarray(scores_of(load_model(run / "router" / f"candidate-{i}.npz", None), u), float)
        d = np.array([router_quality(c[k], w[k], s[k]).apgr
                      - router_quality(base[k], w[k], s[k]).apgr for k in draws])  # fmt: skip
        print(f"  learned@{total}: {apgr(c) - apgr(base):+.4f}, 95 % [{np.quantile(d, .025):+.4f}, "
              f"{np.quantile(d, .975):+.4f}]")  # fmt: skip
    schemes = [("current (30, 30)", 30.0, 30.0), ("embed 3", 3.0, 30.0), ("embed 1", 1.0, 30.0),
               ("embed 0.3", 0.3, 30.0), ("features frozen", 30.0, 1e6)]  # fmt: skip
    print("3. APGR on the unseen part by prior strength (70 % of the labels / all of them)")
    for total in counts:
        parts = []
        for name, l2e, l2f in schemes:
            got = [apgr(np.asarray(scores_of(fit(data.subset(np.arange(len(rows)) < cut), prior,
                                                 l2e, l2f), u), float))
                   for cut in (int(total * 0.7), total)]  # fmt: skip
            parts.append(f"{name} {got[0]:.4f}/{got[1]:.4f}")
        print(f"  @{total}: " + "; ".join(parts))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
