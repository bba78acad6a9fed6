"""`hybrid-gateway bench ...`: the benchmarks, one module each.

    bench overhead   the gateway's pass-through cost against a bare relay (wrk)
    bench run        a workload replayed through strategies, scored for quality and cost

Each module exposes ``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib

BENCHES: dict[str, tuple[str, str]] = {
    "overhead": (
        "hybrid_gateway.tools.overhead.cli",
        "gateway pass-through cost vs a bare aiohttp relay, with wrk",
    ),
    "run": (
        "hybrid_gateway.tools.bench.cli",
        "replay a workload through strategies (heavy-only, hybrid, ...): latency, quality, cost",
    ),
}


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench_command", metavar="BENCH", required=True)
    for name, (module, help_text) in BENCHES.items():
        bench = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(bench)


def run(args: argparse.Namespace) -> int:
    module = importlib.import_module(BENCHES[args.bench_command][0])
    return int(module.run(args))
