"""Score every pair of a file with cross-encoder rerankers once, then measure rules offline.

    python benchmarks/experiments/cache_reranker_scores.py score --pairs F --models M1 [M2 ..] \
        --out scores.npz
    python benchmarks/experiments/cache_reranker_scores.py measure --scores scores.npz [..] \
        --split-seeds 7 8 [--target 0.95 --z 1.645] [--cross-fit | --ensemble] [--inner | --grow]

``measure`` reproduces `cache eval --split-seed S --reranker M` (cosine floor keeping 99 % of
DEV's positives, Wilson-bound threshold on DEV, figures on TEST, training pairs excluded) for
each model, from the saved scores, so several models and seeds cost one scoring pass.
``--inner`` is the protocol of ``cache_split_files.py`` (models trained on the whole DEV half):
the TEST half is cut by the inner seed, one part calibrates and the other is measured, then the
other way round.  ``--grow`` (models trained on D1, the pairs `train-reranker --split-seed S`
takes): each TEST part is measured three times, calibrated on D2 (the rest of DEV), on the
other TEST part, and on both together, so the same model and the same measured pairs show what
twice the calibration pairs buy.  ``--ensemble``: one rule, the mean of the models' scores.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from hybrid_gateway.cache.semantic.cli import _DEFAULT_CACHE, _score
from hybrid_gateway.cache.semantic.cross_encoder import load_cross_encoder
from hybrid_gateway.cache.semantic.cross_encoder_eval import POSITIVES_KEPT
from hybrid_gateway.cache.semantic.evaluate import INNER_SEED, measured
from hybrid_gateway.cache.semantic.pairs import load_pairs, split_pairs
from hybrid_gateway.embedding.settings import EmbeddingConfig


def score(args: argparse.Namespace) -> None:
    pairs = load_pairs(args.pairs)
    scored, _, _ = _score(pairs, EmbeddingConfig(), _DEFAULT_CACHE, len(pairs))
    out: dict[str, np.ndarray] = {"cosine": scored.cosine, "labels": scored.labels}
    names = []
    wanted = np.load(args.only_seen_by)["trained0"] if args.only_seen_by else None
    if args.test_half_of is not None:  # only the TEST half of this split seed
        test = {id(p) for p in split_pairs(pairs, seed=args.test_half_of)[1]}
        half = np.array([id(p) in test for p in pairs])
        wanted = half if wanted is None else wanted & half
    for n, path in enumerate(args.models):
        model = load_cross_encoder(path)
        trained = np.array([model.was_trained_on(p.a, p.b) for p in pairs])
        s = np.full(len(pairs), np.nan)
        started = time.perf_counter()
        for i, p in enumerate(pairs):
            if trained[i] or (wanted is not None and not wanted[i]):
                continue  # never measured on; or not asked for (a partner, --test-half-of)
            s[i] = model.score(p.a, p.b)
            if i % 1000 == 0:
                print(f"{path}: {i}/{len(pairs)} ({time.perf_counter() - started:.0f} s)",
                      file=sys.stderr)
        out[f"score{n}"] = s
        out[f"trained{n}"] = trained
        names.append(str(path))
    np.savez(args.out, names=np.array(names), pairs=str(args.pairs), **out)


def _parts(pairs: list, seed: int, protocol: str) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, calibrate rows, measure rows) of split ``seed``."""
    index = {id(p): i for i, p in enumerate(pairs)}

    def rows(part: list) -> np.ndarray:
        return np.array([index[id(p)] for p in part])

    dev_p, test_p = split_pairs(pairs, seed=seed)
    if protocol == "dev/test":
        return [("dev/test", rows(dev_p), rows(test_p))]
    a, b = map(rows, split_pairs(test_p, seed=INNER_SEED))
    if protocol == "inner":
        return [("calibrate/measure", a, b), ("measure/calibrate", b, a)]
    # "grow": a model trained on D1 (train-reranker --split-seed S), the same measured part
    # calibrated on D2, on the other TEST part, and on both together (twice the pairs)
    d2 = rows(split_pairs(dev_p, seed=INNER_SEED)[1])
    return [(f"{cal_name}/{m_name}", cal, m)
            for m_name, m, other_name, other in (("B", b, "A", a), ("A", a, "B", b))
            for cal_name, cal in (("D2", d2), (other_name, other),
                                  (f"D2+{other_name}", np.r_[d2, other]))]


def _rows(args: argparse.Namespace, pairs: list, cosine: np.ndarray, labels: np.ndarray,
          seed: int, name: str, s: np.ndarray, trained: np.ndarray) -> None:
    protocol = "inner" if args.inner else "grow" if args.grow else "dev/test"
    for part, dev, test in _parts(pairs, seed, protocol):
        _row(args, cosine, labels, seed, name, s, dev[~trained[dev]], test[~trained[test]],
             part)


def _row(args: argparse.Namespace, cosine: np.ndarray, labels: np.ndarray, seed: int,
         name: str, s: np.ndarray, d: np.ndarray, t: np.ndarray, part: str) -> None:
    if not len(d) or not len(t):
        raise SystemExit(f"{name}: split {seed} ({part}) leaves no pairs the model did not see "
                         "(trained on the whole DEV half? use --inner)")
    if np.isnan(s[d]).any() or np.isnan(s[t]).any():
        raise SystemExit(f"{name}: pairs of split {seed} ({part}) were not scored")
    pos = cosine[d][labels[d]]
    floor = float(np.quantile(pos, 1.0 - POSITIVES_KEPT, method="lower"))
    for rule, values in (("reranker", s), ("reranker+cos", s + args.cos_weight * cosine)):
        v = np.where(cosine >= floor, values, -np.inf)
        r = measured(v[d], labels[d], v[t], labels[t], args.target, args.z)
        print(json.dumps({"seed": seed, "part": part, "model": name, "rule": rule,
                          "dev": len(d), "test": len(t), "floor": round(floor, 4),
                          "threshold": round(r.threshold, 4),
                          "precision": round(r.precision, 4), "recall": round(r.recall, 4),
                          "auc": round(r.auc, 4), "best": round(r.best_recall, 4)}))


def measure(args: argparse.Namespace) -> None:
    files = [np.load(path) for path in args.scores]
    pairs = load_pairs(str(files[0]["pairs"]))
    cosine, labels = files[0]["cosine"], files[0]["labels"]
    models = [(Path(str(name)).name, z[f"score{n}"], z[f"trained{n}"])
              for z in files for n, name in enumerate(z["names"])]
    for seed in args.split_seeds:
        if args.cross_fit:  # each pair scored by the first model that did not see it
            s = np.full(len(pairs), np.nan)
            unseen = np.zeros(len(pairs), dtype=bool)
            for _, score, trained in models:
                take = ~unseen & ~trained
                s[take], unseen = score[take], unseen | take
            name = " + ".join(m[0] for m in models)
            _rows(args, pairs, cosine, labels, seed, name, np.nan_to_num(s), ~unseen)
        elif args.ensemble:  # trained: seen by any of them
            name = " & ".join(m[0] for m in models)
            mean = np.mean([m[1] for m in models], axis=0)
            _rows(args, pairs, cosine, labels, seed, name, mean,
                  np.any([m[2] for m in models], axis=0))
        else:
            for name, score, trained in models:
                _rows(args, pairs, cosine, labels, seed, name, score, trained)


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="action", required=True)
    s = sub.add_parser("score")
    s.add_argument("--pairs", required=True)
    s.add_argument("--models", nargs="+", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--only-seen-by", help="scores.npz of a first model: score only its "
                   "training pairs (all a cross-fitting partner is asked about)")
    s.add_argument("--test-half-of", type=int, metavar="SEED",
                   help="score only the TEST half of this split seed (for measure --inner)")
    m = sub.add_parser("measure")
    m.add_argument("--scores", nargs="+", required=True)
    m.add_argument("--cross-fit", action="store_true",
                   help="one rule: each pair scored by the first model not trained on it")
    m.add_argument("--ensemble", action="store_true", help="one rule: the models' mean score")
    m.add_argument("--inner", action="store_true",
                   help="calibrate and measure on the two inner parts of TEST, both ways")
    m.add_argument("--grow", action="store_true",
                   help="models trained on D1 (train-reranker --split-seed): each TEST part "
                        "measured with D2, the other TEST part, and both calibrating")
    m.add_argument("--split-seeds", type=int, nargs="+", default=[7, 8])
    m.add_argument("--target", type=float, default=0.95)
    m.add_argument("--z", type=float, default=1.645)
    m.add_argument("--cos-weight", type=float, default=1.0)
    args = parser.parse_args()
    score(args) if args.action == "score" else measure(args)


if __name__ == "__main__":
    main()
