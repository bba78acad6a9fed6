"""`hybrid-gateway bench ...`: the benchmarks, one module each.

    bench overhead   the gateway's pass-through cost against a bare relay (wrk)
    bench run        a workload replayed through strategies, scored for quality and cost
    bench soak       sustained mixed traffic, sampled for leaks (RSS, fds, tasks, sockets)
    bench degrade    faults and overload under load: backup, lane isolation, 2x capacity
    bench replicas   one lane on N emulator replicas: balancing policies, a replica killed
    bench scale-out  1 vs 2 worker processes, and the per-request cost of the Redis stores
    bench semantic   semantic cache lookup latency at 10k/100k/1M entries, embedding batching
    bench semantic-pg  semantic lookup cost: PostgreSQL + pgvector vs the in-process index
    bench learn      issue 23's learning curves: router and cache labels bought vs quality

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
    "soak": (
        "hybrid_gateway.tools.soak.cli",
        "sustained mixed traffic; fails if RSS, fds, tasks or upstream sockets keep growing",
    ),
    "degrade": (
        "hybrid_gateway.tools.bench.degrade",
        "faults and overload under load: 20 percent errors + backup, lane isolation, 2x capacity",
    ),
    "replicas": (
        "hybrid_gateway.tools.bench.replicas",
        "one lane on N emulator replicas: balancing policies, prefix-cache hits, a replica killed",
    ),
    "routing": (
        "hybrid_gateway.routing.bench",
        "routing decision latency p50/p99: forced model, rules, rules + classifier",
    ),
    "scale-out": (
        "hybrid_gateway.stores.bench",
        "1 vs 2 worker processes, memory vs Redis stores: req/s, latency, CPU per request",
    ),
    "semantic": (
        "hybrid_gateway.cache.semantic.bench",
        "semantic cache: lookup p50/p99 at 10k/100k/1M entries, embedding micro-batching",
    ),
    "semantic-pg": (
        "hybrid_gateway.cache.semantic.bench_pg",
        "semantic lookup p50/p99 on PostgreSQL + pgvector vs in-process, HNSW recall",
    ),
    "learn": (
        "hybrid_gateway.tools.learncurve.cli",
        "learning from audits: labels bought vs router APGR and cache hits / false hits",
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
