"""`hybrid-gateway router ...`: fit, evaluate and calibrate the complexity classifier.

    router train       fit a model from outcome or label files (or --preset default)
    router eval        APGR / CPT(50 %) / CPT(80 %) of a model vs the random and length baselines
    router distil      the classifier's static student, for routing.classifier.cascade
    router calibrate   the threshold -> (heavy share, cost, quality) curve; write the cheapest
                       threshold meeting a quality floor, and the category gates, to a config

Each module exposes ``add_arguments(parser)`` and ``run(args) -> int``; the flags for reading
data files are shared and defined here.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from pathlib import Path

from hybrid_gateway.routing.dataset import DEFAULT_EMBED_CACHE
from hybrid_gateway.routing.outcomes import Columns
from hybrid_gateway.routing.training import FitSettings
from hybrid_gateway.tools.cliargs import float_at_least, int_at_least

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("hybrid_gateway.routing.train_cli", "fit the classifier from labelled data"),
    "eval": ("hybrid_gateway.routing.eval_cli", "APGR/CPT of a model vs random and length"),
    "calibrate": (
        "hybrid_gateway.routing.calibrate_cli",
        "pick the cheapest threshold meeting a quality floor; category gates; CSV + PNG",
    ),
    # routing.classifier.cascade: the static student (tools/router_distil.py)
    "distil": ("hybrid_gateway.tools.router_distil", "fit a classifier's static student"),
    # learning.router_update: the versions in the records store (learning/versions_cli.py)
    "versions": ("hybrid_gateway.learning.versions_cli", "list the classifier model versions"),
    "rollback": ("hybrid_gateway.learning.versions_cli", "make an earlier model version live"),
}


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """Which columns of a data file hold the weak and strong scores (see routing/outcomes.py)."""
    group = parser.add_argument_group("data columns")
    group.add_argument(
        "--weak", help="weak (light) model's score column (default: Mixtral-8x7B or weak_score)"
    )
    group.add_argument(
        "--strong",
        help="strong (heavy) model's score column (default: gpt-4-1106-preview or strong_score)",
    )
    group.add_argument("--category", help="category column (default: subject / eval_name)")
    group.add_argument(
        "--questions",
        type=Path,
        help="question_id -> prompt JSONL (Arena-style "
        "files; default: the *_questions.jsonl next to a *_scores.csv)",
    )
    group.add_argument(
        "--format",
        choices=["auto", "label", "outcomes"],
        default="auto",
        help="label: a simple/complex 'label' column; outcomes: weak/strong "
        "scores; auto: a 'label' column means labels",
    )
    group.add_argument(
        "--embed-cache",
        type=Path,
        default=DEFAULT_EMBED_CACHE,
        help="SQLite file of computed embeddings, reused across runs (default: %(default)s)",
    )


def _int_in(low: int, high: int) -> Callable[[str], int]:
    at_least = int_at_least(low)

    def parse(text: str) -> int:
        value = at_least(text)
        if value > high:
            raise argparse.ArgumentTypeError(f"must be <= {high}, got {value}")
        return value

    return parse


def add_fit_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = FitSettings()
    group = parser.add_argument_group("model")
    group.add_argument("--l2", type=float_at_least(0.0), default=defaults.l2,
                       help="ridge penalty (default: %(default)s)")  # fmt: skip
    group.add_argument("--memory-k", type=int_at_least(0), default=defaults.memory_k,
                       help="neighbour memory: training questions averaged per decision "
                       "(0 = linear only; default: %(default)s)")  # fmt: skip
    group.add_argument("--memory-alpha", type=float_at_least(0.0), default=defaults.memory_alpha,
                       help="weight of the neighbour memory (default: %(default)s)")  # fmt: skip
    group.add_argument("--ngram-bits", type=_int_in(0, 22), default=defaults.ngram_bits,
                       help="hashed character n-grams: log2 of the buckets "
                       "(0 = none; default: %(default)s)")  # fmt: skip
    group.add_argument("--ngram-n", type=_int_in(1, 6), default=defaults.ngram_max_n,
                       help="longest character n-gram (default: %(default)s)")  # fmt: skip
    group.add_argument("--ngram-l2", type=float_at_least(0.0), default=defaults.ngram_l2,
                       help="ridge penalty on the n-gram weights "
                       "(default: %(default)s)")  # fmt: skip
    group.add_argument("--per-source", action=argparse.BooleanOptionalAction,
                       default=defaults.per_source,
                       help="fit one model per source file and average them (ignored with "
                       "n-grams); --no-per-source: one model over all rows "
                       "(default: %(default)s)")  # fmt: skip
    group.add_argument("--target", choices=("soft", "outcomes"), default=defaults.target,
                       help="soft: one logistic model of 0.5 + 0.5*(strong - weak); outcomes: "
                       "softmax models of light better / both wrong / both right / heavy better, "
                       "scored by the expected gain (not with n-grams; "
                       "default: %(default)s)")  # fmt: skip


def fit_settings_of(args: argparse.Namespace) -> FitSettings:
    if args.target == "outcomes" and args.ngram_bits > 0:
        print("router: --target outcomes cannot be combined with --ngram-bits (the n-grams "
              "extend the soft-target logistic model)", file=sys.stderr)  # fmt: skip
        raise SystemExit(2)
    return FitSettings(
        l2=args.l2,
        memory_k=args.memory_k,
        memory_alpha=args.memory_alpha,
        ngram_bits=args.ngram_bits,
        ngram_max_n=args.ngram_n,
        ngram_l2=args.ngram_l2,
        per_source=args.per_source,
        target=args.target,
    )


def columns_of(args: argparse.Namespace) -> Columns:
    return Columns(
        weak=args.weak,
        strong=args.strong,
        category=args.category,
        questions=args.questions,
        format=args.format,
    )


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="router_command", metavar="COMMAND", required=True)
    for name, (module, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(command)


def run(args: argparse.Namespace) -> int:
    module = importlib.import_module(COMMANDS[args.router_command][0])
    return int(module.run(args))
