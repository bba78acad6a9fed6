"""The options of `hybrid-gateway bench soak`."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from hybrid_gateway.tools.cliargs import add_process_options, float_at_least, int_at_least

__all__ = ["add_arguments", "duration", "run"]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def duration(text: str) -> float:
    """``30m``, ``2m``, ``90s``, ``1h`` or plain seconds."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smh]?)\s*", text)
    if match is None or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"a duration such as 30m, 2m or 90s; got {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--duration", type=duration, default=duration("30m"), help="traffic time (30m)"
    )
    parser.add_argument(
        "--warmup",
        type=duration,
        default=None,
        help="samples before this are not fitted (default: a quarter of --duration, "
        "at least 60s or half the run, at most 5m)",
    )
    parser.add_argument(
        "--interval", type=float_at_least(0.5), default=3.0, help="seconds between samples (3)"
    )
    parser.add_argument(
        "--concurrency", type=int_at_least(1), default=16, help="client connections (16)"
    )
    parser.add_argument("--seed", type=int, default=7, help="traffic mix seed (7)")
    parser.add_argument(
        "--out", type=Path, default=Path("out/soak"), help="report folder (out/soak/)"
    )
    add_process_options(parser, plots="the PNG")


def warmup_s(args: argparse.Namespace) -> float:
    if args.warmup is not None:
        return float(min(args.warmup, args.duration / 2))
    # Measured here: the gateway's RSS climbs for its first 1-2 minutes (cache, request log
    # pages, allocator arenas), then stays flat within a MiB.
    return float(min(max(args.duration / 4, 60.0), 300.0, args.duration / 2))


def run(args: argparse.Namespace) -> int:
    from hybrid_gateway.tools.soak.runner import main

    return main(args)
