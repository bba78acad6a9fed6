"""`hybrid-gateway bench learn`: issue 23's goals as learning curves, with plots.

    hybrid-gateway bench learn --out benchmarks/results [--name learn-reference]
        [--part both|router|cache|default|all] [--checkpoints 50,100,200,400] [--unseen 400] ...

``both`` is the router and cache curves; ``default`` the default-workload goal
(``default_goal.py``); ``all`` the three.

Writes ``<out>/<name>.json``, ``<name>.md``, ``<name>-router.png`` and ``<name>-cache.png``;
the processes' folders (workloads, logs, request logs, models) go under ``<out>/<name>/``.
Exit 0 with the figures written (whatever the verdicts), 1 if the run broke, 2 on bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybrid_gateway.tools.cliargs import sigterm_stops_the_run
from hybrid_gateway.tools.learncurve.cache_curve import (
    CacheSettings,
    held_out_eval,
    run_cache_curve,
)
from hybrid_gateway.tools.learncurve.default_goal import DefaultSettings, run_default_goal
from hybrid_gateway.tools.learncurve.report import verdicts, write_report
from hybrid_gateway.tools.learncurve.router_curve import RouterSettings, run_router_curve
from hybrid_gateway.tools.processes import ProcessStartError
from hybrid_gateway.tools.workload.builder import ZH_SIMPLE

__all__ = ["add_arguments", "run"]

DEFAULT_EVAL_PAIRS = ("cache/pawsx_zh_valid.tsv", "cache/lcqmc_dev.csv", "cache/bq_dev.csv")


def _counts(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a comma list of label counts, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"label counts must be >= 1, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--out", type=Path, required=True, help="folder for the JSON, Markdown and plots")
    add("--name", default=None, help="file name stem (default learn-<UTC time>)")
    add("--part", choices=["both", "router", "cache", "default", "all"], default="both",
        help="both: the router and cache curves; default: the default-workload goal; all")
    add("--data", type=Path, default=Path("../shared/data"), help="the public data folder")
    add("--concurrency", type=int, default=16, help="clients sending at once (16)")
    add(
        "--embed-cache",
        type=Path,
        default=None,
        help="SQLite embeddings cache for training and scoring (default <out>/<name>/embed...)",
    )
    router = parser.add_argument_group("router curve")
    router.add_argument("--hard-workload", type=Path, help="a hard workload (default: build one)")
    router.add_argument("--hard-size", type=int, default=4000, help="items of the built one")
    router.add_argument("--unseen", type=int, default=400, help="last items, never sent (400)")
    router.add_argument(
        "--checkpoints",
        type=_counts,
        default=(50, 100, 200),
        help="labels bought at which to retrain (50,100,200)",
    )
    router.add_argument(
        "--router-rate",
        type=float,
        default=0.04,
        help="learning.audit.router.rate (0.04: 3.7 %% of heavy-only measured; 0.045: 5.2 %%)",
    )
    router.add_argument("--holdout", type=float, default=0.3, help="router train's replay share")
    router.add_argument("--prior-l2", type=float, default=30.0, help="router train --prior-l2")
    router.add_argument("--folds", type=int, default=0,
                        help="router train --folds (2 or more: cross-fitted; 0: --holdout)")
    default = parser.add_argument_group("default-workload goal (--part default or all)")
    default.add_argument("--default-workload", type=Path, help="a default workload (else built)")
    default.add_argument("--default-size", type=int, default=24000,
                         help="items of the built one (24000: about 840 audits at 0.04)")
    default.add_argument("--default-unseen", type=int, default=3000,
                         help="items spread through it, never sent, that score the routings")
    default.add_argument("--default-rate", type=float, default=0.04,
                         help="learning.audit.router.rate while the first part is sent (0.04)")
    default.add_argument("--default-floor", type=float, default=0.99,
                         help="quality to keep, of heavy-only's (0.99)")
    cache = parser.add_argument_group("cache curve")
    cache.add_argument("--cache-workload", type=Path, help="a paraphrase-heavy workload")
    cache.add_argument("--cache-size", type=int, default=2000, help="items of the built one")
    cache.add_argument("--cache-rate", type=float, default=0.5, help="learning.audit.cache.rate")
    cache.add_argument(
        "--cache-target",
        type=float,
        default=0.95,
        help="learning.cache_threshold.target_precision (0.95)",
    )
    cache.add_argument("--min-audits", type=int, default=20, help="cache_threshold.min_audits")
    cache.add_argument("--near-miss-rate", type=float, default=1.0,
                       help="learning.audit.near_miss.rate of the learned run (0: none)")
    cache.add_argument("--near-miss-margin", type=float, default=0.05,
                       help="learning.audit.near_miss.margin (0.05)")
    cache.add_argument("--cache-trap-rate", type=float, default=0.1,
                       help="workload build --trap-rate of the built one (0.1)")
    cache.add_argument("--cache-unseen-size", type=int, default=2000, metavar="N",
                       help="items of a second built workload (another seed, none of the first's "
                       "questions) served at both final thresholds (2000; 0: none)")
    cache.add_argument("--cache-near-duplicate-cut", type=float, default=0.4, metavar="DICE",
                       help="workload build --near-duplicate-cut of the built one (0.4; 0: off)")
    cache.add_argument("--cache-zh-sources", nargs="+", metavar="SOURCE",
                       default=list(ZH_SIMPLE),
                       help="the pair sources of the built workload (workload build --zh-sources)")
    cache.add_argument(
        "--eval-pairs",
        nargs="*",
        default=list(DEFAULT_EVAL_PAIRS),
        help="pair files under --data for the held-out cache eval",
    )
    cache.add_argument("--eval-sample", type=int, default=600, help="pairs per file (600)")
    parser.add_argument("--no-plots", action="store_true")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    started = datetime.now(UTC)
    name = args.name or f"learn-{started:%Y%m%d-%H%M%S}"
    folder = args.out.resolve() / name
    folder.mkdir(parents=True, exist_ok=True)
    embed_cache = args.embed_cache or folder / "embeddings.sqlite3"
    report: dict[str, Any] = {"command": "hybrid-gateway " + " ".join(sys.argv[1:]),
                              "started_at": started.isoformat()}  # fmt: skip
    clock = time.monotonic()
    try:
        with sigterm_stops_the_run():
            if args.part in ("both", "router", "all"):
                report["router"] = _router(args, folder, embed_cache)
            if args.part in ("default", "all"):
                report["default"] = _default(args, folder, embed_cache)
            if args.part in ("both", "cache", "all"):
                report["cache"] = _cache(args, folder, embed_cache)
    except (ValueError, FileNotFoundError) as exc:
        print(f"bench learn: {exc}", file=sys.stderr)
        return 2
    except (ProcessStartError, OSError, RuntimeError) as exc:
        print(f"bench learn: the run broke: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench learn: interrupted; every process it started is stopped", file=sys.stderr)
        return 130
    report["wall_s"] = round(time.monotonic() - clock, 1)
    report["verdicts"] = verdicts(report)
    for path in write_report(report, args.out.resolve(), name, plots=not args.no_plots):
        print(f"wrote {path}")
    return 0


def _build(argv: list[str]) -> None:
    from hybrid_gateway.cli import main

    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["workload", "build", *argv])
    if code != 0:
        raise ValueError(f"workload build {' '.join(argv)} exited {code}")


def _router(args: argparse.Namespace, folder: Path, embed_cache: Path) -> dict[str, Any]:
    workload = args.hard_workload
    if workload is None:
        workload = folder / "hard.jsonl"
        _build(["--kind", "hard", "--size", str(args.hard_size), "--seed", "7", "--repeat-rate",
                "0", "--data", str(args.data), "--out", str(workload)])  # fmt: skip
    settings = RouterSettings(
        folder / "router",
        workload.resolve(),
        args.unseen,
        args.checkpoints,
        args.router_rate,
        concurrency=args.concurrency,
        holdout=args.holdout,
        prior_l2=args.prior_l2,
        folds=args.folds,
        embed_cache=embed_cache,
    )
    return run_router_curve(settings)


def _default(args: argparse.Namespace, folder: Path, embed_cache: Path) -> dict[str, Any]:
    workload = args.default_workload
    if workload is None:
        workload = folder / "default.jsonl"
        _build(["--size", str(args.default_size), "--seed", "7", "--repeat-rate", "0",
                "--data", str(args.data), "--out", str(workload)])  # fmt: skip
    settings = DefaultSettings(
        folder / "default",
        workload.resolve(),
        args.default_unseen,
        args.default_rate,
        concurrency=args.concurrency,
        floor=args.default_floor,
        embed_cache=embed_cache,
    )
    return run_default_goal(settings)


def _cache(args: argparse.Namespace, folder: Path, embed_cache: Path) -> dict[str, Any]:
    workload = args.cache_workload
    mix = ["--zh-share", "1", "--complex-share", "0", "--repeat-rate", "0.5",
           "--trap-rate", str(args.cache_trap_rate),
           "--near-duplicate-cut", str(args.cache_near_duplicate_cut),
           "--zh-sources", *args.cache_zh_sources, "--data", str(args.data)]  # fmt: skip
    if workload is None:
        workload = folder / "paraphrase.jsonl"
        _build(["--size", str(args.cache_size), "--seed", "21", *mix, "--out", str(workload)])
    unseen = None
    if args.cache_unseen_size > 0:
        unseen = folder / "paraphrase-unseen.jsonl"
        _build(["--size", str(args.cache_unseen_size), "--seed", "22", *mix,
                "--exclude", str(workload), "--out", str(unseen)])  # fmt: skip
    settings = CacheSettings(
        folder / "cache",
        workload.resolve(),
        args.cache_rate,
        args.cache_target,
        min_audits=args.min_audits,
        concurrency=args.concurrency,
        near_rate=args.near_miss_rate,
        near_margin=args.near_miss_margin,
        unseen=None if unseen is None else unseen.resolve(),
    )
    result = run_cache_curve(settings)
    thresholds = {"bundled": result["bundled_threshold"]}
    learned = result["runs"]["learned"]["final_threshold"]
    if learned is not None:
        thresholds["learned"] = learned
    files = [args.data / f for f in args.eval_pairs]
    result["held_out"] = held_out_eval(files, workload, folder / "cache-eval", thresholds,
                                       args.eval_sample, embed_cache)  # fmt: skip
    return result


def dumps(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False)
