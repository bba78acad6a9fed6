"""`hybrid-gateway cache train-reranker`: fine-tune the bundled e5-small as a cross-encoder.

    cache train-reranker --pairs FILE [FILE ...] --out MODEL.npz [--split-seed 7] [--sample N]
                         [--init EARLIER.npz]

With ``--split-seed S`` it trains on the pairs ``cache eval --split-seed S`` trains its own
verifier on (half of the DEV half), so ``cache eval --split-seed S --reranker MODEL.npz``
calibrates on the other half of DEV and measures on TEST.  Needs torch (extra ``[train]``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hybrid_gateway.cache.semantic.cross_encoder import CrossEncoderError, load_cross_encoder
from hybrid_gateway.cache.semantic.cross_encoder_train import FineTuneSettings, train_cross_encoder
from hybrid_gateway.cache.semantic.evaluate import inner_seed
from hybrid_gateway.cache.semantic.pairs import load_pairs, split_pairs
from hybrid_gateway.learning.from_log import add_pair_source

_DEFAULTS = FineTuneSettings()


def configure(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tr = sub.add_parser("train-reranker", help="fine-tune the bundled e5 as a pair cross-encoder")
    add_pair_source(tr, "training pair file(s)")  # or --from-log LOG_OR_CONFIG: the audits
    tr.add_argument("--out", type=Path, required=True, help="the model file to write (.npz)")
    tr.add_argument("--split-seed", type=int,
                    help="train only on the verifier's training half of the DEV half of each "
                         "file's seeded split (as `cache eval --split-seed` splits)")  # fmt: skip
    tr.add_argument("--part", type=int, choices=(1, 2), default=1,
                    help="with --split-seed: which half of DEV to train on (2: the half "
                         "`cache eval` calibrates on; for `--reranker P1 P2`)")  # fmt: skip
    tr.add_argument("--init", type=Path,
                    help="continue from this fine-tuned model (trained on other pairs) instead "
                         "of the bundled one; its training pairs stay excluded")  # fmt: skip
    tr.add_argument("--sample", type=int, help="seeded sample of at most N pairs per file")
    tr.add_argument("--seed", type=int, default=7, help="seed of --sample")
    tr.add_argument("--epochs", type=float, default=_DEFAULTS.epochs)
    tr.add_argument("--lr", type=float, default=_DEFAULTS.lr)
    tr.add_argument("--batch-size", type=int, default=_DEFAULTS.batch_size)
    tr.add_argument("--train-seed", type=int, default=_DEFAULTS.seed, help="shuffling and init")


def train(args: argparse.Namespace) -> int:
    if args.epochs <= 0 or args.lr <= 0 or args.batch_size < 1:
        print("--epochs and --lr must be > 0, --batch-size >= 1", file=sys.stderr)
        return 2
    if args.sample is not None and args.sample < 1:
        print("--sample must be >= 1", file=sys.stderr)
        return 2
    pairs = [p for f in args.pairs for p in load_pairs(f, limit=args.sample, seed=args.seed)]
    if args.split_seed is not None:
        dev = split_pairs(pairs, seed=args.split_seed)[0]
        pairs = split_pairs(dev, seed=inner_seed(args.split_seed))[args.part - 1]
    if not pairs:
        print("no training pairs", file=sys.stderr)
        return 2
    names = ", ".join(Path(p).name for p in args.pairs)
    half = "" if args.split_seed is None else f", DEV part {args.part}, split {args.split_seed}"
    sample = "" if args.sample is None else f", sample {args.sample} seed {args.seed}"
    settings = FineTuneSettings(epochs=args.epochs, lr=args.lr, batch_size=args.batch_size,
                             seed=args.train_seed)  # fmt: skip
    try:
        init = load_cross_encoder(args.init) if args.init is not None else None
        model = train_cross_encoder(
            pairs,
            settings,
            info={"trained_on": f"{names} ({len(pairs)} pairs{sample}{half})"},
            init=init,
        )
    except (ImportError, CrossEncoderError) as exc:
        print(str(exc), file=sys.stderr)
        return 2
    model.save(args.out)
    print(f"{args.out}: cross-encoder from {model.base} fine-tuned on {len(pairs)} pairs "
          f"({args.epochs:g} epochs, {model.info['seconds']} s)")  # fmt: skip
    return 0
