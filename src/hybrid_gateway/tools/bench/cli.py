"""`hybrid-gateway bench run`: a workload replayed through strategies, scored for quality and cost.

For each strategy (``heavy-only``, ``hybrid``, ``hybrid-cache``, ``full`` and its ablations,
see strategies.py) one run starts, on 127.0.0.1 and free ports, a light and a heavy emulator
(``--profile``) loaded with the workload's labels and a fresh gateway configured by the
strategy; then, at each concurrency and/or once in the open loop (``--mode``), a discarded
warm-up and a measured stage driven by the load generator in its own process, sampling the
gateway's CPU and RSS.  It writes ``bench-YYYYmmdd-HHMMSS.{json,md}`` (with the Project X
verdict per strategy and stage) and three PNG plots to ``--out`` and prints the strategy
table.  Every process it starts is stopped before it returns, on success, error or Ctrl-C.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hybrid_gateway.tools.cliargs import (
    add_process_options,
    concurrency_list,
    float_at_least,
    int_at_least,
)

__all__ = ["add_arguments", "run"]

DEFAULT_STRATEGIES = ("heavy-only", "hybrid", "hybrid-cache")
# Every strategy `--strategies` accepts (strategies.py): the defaults, then the whole article
# (`full`, from examples/gateway-full.yaml) and its ablations.
KNOWN_STRATEGIES = (
    *DEFAULT_STRATEGIES, "full", "full-no-classifier", "full-no-semantic", "full-no-degrade",
)  # fmt: skip
ARTICLE_STRATEGIES = ("heavy-only", "hybrid", "full", "full-no-classifier", "full-no-semantic",
                      "full-no-degrade")  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `hybrid-gateway bench run`."""
    parser.add_argument(
        "--workload",
        type=Path,
        default=None,
        help="workload JSONL (default: build one with `workload build` into --out)",
    )
    parser.add_argument(
        "--size", type=int_at_least(1), default=400, help="items of the built workload (400)"
    )
    parser.add_argument("--seed", type=int, default=7, help="seed of the built workload (7)")
    parser.add_argument(
        "--kind",
        choices=("default", "hard"),
        default="default",
        help="kind of the built workload (default; hard: measured outcomes only)",
    )
    _load_arguments(parser)


def _load_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--strategies",
        type=_strategy_list,
        default=list(DEFAULT_STRATEGIES),
        help=f"comma list of {','.join(KNOWN_STRATEGIES)} (default heavy-only,hybrid,hybrid-cache)",
    )
    parser.add_argument(
        "--concurrency", type=concurrency_list, default=[20, 50, 100], help="comma list (20,50,100)"
    )
    parser.add_argument(
        "--duration", type=float_at_least(0.5), default=30.0, help="seconds per stage (30)"
    )
    parser.add_argument(
        "--warmup",
        type=float_at_least(0.0),
        default=5.0,
        help="warm-up seconds before each stage, discarded (5)",
    )
    parser.add_argument(
        "--mode",
        choices=("closed", "open", "both"),
        default="closed",
        help="closed loop at each concurrency; open loop (Poisson at --rate, else the "
        "workload's arrival times); both: the closed stages, then an open stage at --rate or "
        "at the rate heavy-only sustained at the highest concurrency",
    )
    parser.add_argument(
        "--rate",
        type=float_at_least(0.001),
        default=None,
        help="open loop: Poisson arrivals at this many requests/s, the same for every strategy",
    )
    parser.add_argument(
        "--profile",
        choices=("default", "article", "h200"),
        default="default",
        help="emulator profiles: default (light, heavy), article (article-light, "
        "article-heavy: calibrated to the article's heavy-only row) or h200 (h200-light, "
        "h200-heavy: an 8B and a 32B model's step times measured on an H200), docs/emulator.md",
    )
    parser.add_argument(
        "--time-scale",
        type=float_at_least(0.0),
        default=1.0,
        help="open mode: multiply arrival offsets by this (1.0)",
    )
    parser.add_argument(
        "--max-requests",
        type=int_at_least(1),
        default=None,
        help="stop each stage after this many requests (default: --duration only)",
    )
    router = parser.add_argument_group(
        "the full strategies' classifier, learned before the run (docs/whole-system.md)"
    )
    router.add_argument(
        "--router-sample",
        type=Path,
        nargs="+",
        default=None,
        help="labelled workloads to learn it from; every question the measured workload asks "
        "is left out (default: one of --kind built with --seed + 1000 and --router-sample-size "
        "items)",
    )
    router.add_argument(
        "--router-sample-size",
        type=int_at_least(0),
        default=2000,
        help="items of the built sample (2000); 0: the config's classifier as shipped",
    )
    router.add_argument(
        "--router-floor",
        type=_fraction,
        default=0.995,
        help="the threshold keeps this share of heavy-only's quality on the sample, through "
        "the rules (0.995)",
    )
    parser.add_argument(
        "--base-config",
        type=Path,
        default=Path("examples/gateway.yaml"),
        help="gateway config giving prices, channels and routing rules (examples/gateway.yaml)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("out/bench"), help="report folder (out/bench/)"
    )
    add_process_options(parser, plots="the PNG plots")


def run(args: argparse.Namespace) -> int:
    from hybrid_gateway.tools.bench.runner import main

    return main(args)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"a number in (0, 1], not {text!r}")
    return value


def _strategy_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if names == ["article"]:
        names = list(ARTICLE_STRATEGIES)
    unknown = [n for n in names if n not in KNOWN_STRATEGIES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"strategies are {','.join(KNOWN_STRATEGIES)} (or `article` for "
            f"{','.join(ARTICLE_STRATEGIES)}); got {text!r}"
        )
    return list(dict.fromkeys(names))
