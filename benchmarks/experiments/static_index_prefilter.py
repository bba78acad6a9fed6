"""Does the sign prefilter find the static index's nearest entry, at the sizes a cache reaches?

    OPENBLAS_NUM_THREADS=1 python benchmarks/experiments/static_index_prefilter.py \
        --pairs ../shared/data/cache/lcqmc_dev.csv ../shared/data/cache/qqp_dev.jsonl \
        --exact-up-to 4096 --embed-cache var/embeddings.sqlite3

The semantic cache's cascade indexes entries by static vectors (``embedding/static.py``) and
searches them exactly up to ``EXACT_UP_TO`` (50,000) entries a partition; the exact product is
then most of a short request's CPU (docs/smart-path-performance.md).  Here: real static vectors
(the first questions of every pair as the stored entries, the second as the queries), one
partition, searched exactly and with the sign prefilter switched on from ``--exact-up-to``.
Reported: how often the prefiltered nearest entry is the exact one, overall and for the
queries whose exact nearest clears the cascade's bound (``--bound``, the only ones e5 is
asked about), and the search time of both.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from hybrid_gateway.cache.semantic.index import PREFILTER_CANDIDATES, NumpyIndex
from hybrid_gateway.cache.semantic.pairs import load_pairs
from hybrid_gateway.embedding.base import namespace_of
from hybrid_gateway.embedding.disk_cache import DiskEmbeddingCache
from hybrid_gateway.embedding.static import StaticE5Embedder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", nargs="+", required=True)
    parser.add_argument("--exact-up-to", type=int, default=4096)
    parser.add_argument("--candidates", type=int, default=PREFILTER_CANDIDATES)
    parser.add_argument("--bound", type=float, default=0.9961)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--embed-cache", type=Path, default=Path("var/embeddings.sqlite3"))
    args = parser.parse_args()
    pairs = [p for path in args.pairs for p in load_pairs(path)]
    stored = list(dict.fromkeys(p.a for p in pairs))
    known = set(stored)
    asked = list(dict.fromkeys(p.b for p in pairs if p.b not in known))[: args.queries]
    model = StaticE5Embedder()
    disk = DiskEmbeddingCache(args.embed_cache, namespace_of(model), model.dim)
    try:
        entries = np.asarray(disk.embed(stored, model.embed), np.float32)
        queries = np.asarray(disk.embed(asked, model.embed), np.float32)
    finally:
        disk.close()
    exact = NumpyIndex(exact_up_to=len(entries) + 1)
    fast = NumpyIndex(exact_up_to=args.exact_up_to, candidates=args.candidates)
    for i, vector in enumerate(entries):
        exact.add("p", i, vector)
        fast.add("p", i, vector)
    same = same_bound = at_bound = 0
    t_exact, t_fast = [], []
    for q in queries:
        started = time.perf_counter()
        ((e_id, e_cos),) = exact.search("p", q, 1)
        t_exact.append(time.perf_counter() - started)
        started = time.perf_counter()
        ((f_id, f_cos),) = fast.search("p", q, 1)
        t_fast.append(time.perf_counter() - started)
        hit = f_id == e_id or f_cos >= e_cos
        same += hit
        if e_cos >= args.bound:
            at_bound += 1
            same_bound += hit
    ms = lambda xs: round(float(np.percentile(np.asarray(xs) * 1000, 50)), 3)  # noqa: E731
    print(json.dumps({
        "entries": len(entries), "queries": len(queries), "exact_up_to": args.exact_up_to,
        "candidates": args.candidates, "nearest_found": round(same / len(queries), 4),
        "queries_at_bound": at_bound,
        "nearest_found_at_bound": round(same_bound / max(at_bound, 1), 4),
        "search_p50_ms_exact": ms(t_exact), "search_p50_ms_prefilter": ms(t_fast),
    }, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
