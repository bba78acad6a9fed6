"""Write a pair file's seeded split as three CSV files: train, calibrate, measure.

    python benchmarks/experiments/cache_split_files.py --pairs lcqmc_dev.csv --split-seed 7 \
        --out out/lcqmc-s7

writes ``train.csv`` (the DEV half of `cache eval --split-seed 7`, all of it), ``calibrate.csv``
and ``measure.csv`` (the TEST half cut in two by the inner seed `cache eval` uses).  So a
reranker trained on twice the pairs `train-reranker --split-seed 7` takes can still be
calibrated and measured on pairs it never saw, with the CLI alone:

    hybrid-gateway cache train-reranker --pairs out/lcqmc-s7/train.csv --out m.npz
    hybrid-gateway cache eval --pairs out/lcqmc-s7/measure.csv \
        --calibrate-on out/lcqmc-s7/calibrate.csv --reranker m.npz --target-precision 0.95 --json
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from hybrid_gateway.cache.semantic.evaluate import INNER_SEED
from hybrid_gateway.cache.semantic.pairs import Pair, load_pairs, split_pairs


def _write(path: Path, pairs: list[Pair]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(["sentence1", "sentence2", "label"])
        out.writerows((p.a, p.b, int(p.same)) for p in pairs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", required=True)
    parser.add_argument("--split-seed", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    dev, test = split_pairs(load_pairs(args.pairs), seed=args.split_seed)
    calibrate, measure = split_pairs(test, seed=INNER_SEED)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, part in (("train", dev), ("calibrate", calibrate), ("measure", measure)):
        _write(args.out / f"{name}.csv", part)
        print(f"{args.out / name}.csv: {len(part)} pairs")


if __name__ == "__main__":
    main()
