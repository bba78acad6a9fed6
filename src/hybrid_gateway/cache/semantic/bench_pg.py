"""`hybrid-gateway bench semantic-pg --postgres URL --out DIR`: the shared path's lookup cost.

What one semantic lookup costs when the vectors live in PostgreSQL + pgvector (``records:
postgres``) against the in-process index, at the same entry count (default 10k, random unit
384-d vectors, each query finds itself, so the decision's guards run too):

    memory         ``SemanticCache.lookup``: worker-thread hop, numpy search, decision
    postgres       ``PgSemanticCache.lookup``: one exact nearest-neighbour query inside the
                   partition (+ the ``last_used`` update of a hit), with the entries in 1
                   partition (the worst case) and spread over ``--partitions`` partitions
    round trip     ``SELECT 1`` on the same connection: the floor of any PostgreSQL lookup
    hnsw           the rejected alternative: an HNSW index (``vector_ip_ops``, default
                   ``ef_search``) queried with the same partition filter; its latency and
                   how often it returns the true nearest row of the partition (recall@1):
                   pgvector filters the index's candidates *after* the approximate search,
                   so a small partition in a big table loses its rows

URL: any database where ``CREATE EXTENSION vector`` works; the bench creates and drops its own
tables (``hgw_semantic_entries`` is dropped first: use a scratch database).  Writes
``semantic-pg-bench.json`` and ``semantic-pg-bench.md``.  A command, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_gateway.cache.semantic.bench import (
    DIM,
    _machine,
    _percentiles,
    _unit,
    _usage,
    write_report,
)
from hybrid_gateway.tools.cliargs import concurrency_list, int_at_least

_HNSW = "hgw_bench_hnsw"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--postgres", required=True, help="postgresql:// URL (scratch database)")
    parser.add_argument("--out", type=Path, required=True, help="folder for JSON + Markdown")
    parser.add_argument("--entries", type=int_at_least(100), default=10_000)
    parser.add_argument(
        "--partitions", type=concurrency_list, default=[1, 100],
        help="partition counts the entries are spread over (comma list)",
    )  # fmt: skip
    parser.add_argument("--queries", type=int_at_least(10), default=300)
    parser.add_argument("--seed", type=int, default=7)


async def _timed(calls: Any, queries: np.ndarray, partition_of: Any) -> list[float]:
    samples = []
    for i, q in enumerate(queries):
        t = time.perf_counter()
        await calls(partition_of(i), q)
        samples.append(time.perf_counter() - t)
    return samples


async def _memory(vectors: np.ndarray, queries: int) -> dict[str, Any]:
    from hybrid_gateway.cache.semantic.cache import CacheBounds, Namespace, SemanticCache
    from hybrid_gateway.cache.semantic.decision import DecisionRule
    from hybrid_gateway.resilience.clock import MonotonicClock

    cache = SemanticCache(bounds=CacheBounds(3600, len(vectors) + 1, 1 << 40),
                          rule=DecisionRule(threshold=0.99), clock=MonotonicClock())  # fmt: skip
    ns = Namespace("tenant:bench", "random@1")
    for i, v in enumerate(vectors):
        await cache.put(ns, "p0", f"question {i}", v, b"{}", _usage())
    samples = await _timed(lambda p, q: cache.lookup(ns, p, "question", q), vectors[:queries],
                           lambda i: "p0")  # fmt: skip
    await cache.aclose()
    return {"partitions": 1, **_percentiles(samples)}


async def _postgres(url: str, vectors: np.ndarray, parts: int, queries: int) -> dict[str, Any]:
    import psycopg

    from hybrid_gateway.cache.semantic.cache import CacheBounds, Namespace
    from hybrid_gateway.cache.semantic.decision import DecisionRule
    from hybrid_gateway.cache.semantic.store_pg import TABLE, PgSemanticCache, vector_literal
    from hybrid_gateway.resilience.clock import MonotonicClock
    from hybrid_gateway.stores.health import StoreHealth

    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f"DROP TABLE IF EXISTS {TABLE}")
    clock = MonotonicClock()
    cache = PgSemanticCache(url, bounds=CacheBounds(3600, len(vectors) + 1, 1 << 40),
                            rule=DecisionRule(threshold=0.99), clock=clock,
                            health=StoreHealth(clock, retry_s=1.0), timeout_s=5.0)  # fmt: skip
    ns = Namespace("tenant:bench", "random@1")
    await cache.maintain()  # creates the table
    rows = [(ns.scope, ns.embedder, f"p{i % parts}", f"question {i}", vector_literal(v))
            for i, v in enumerate(vectors)]  # fmt: skip
    with psycopg.connect(url, autocommit=True) as db, db.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {TABLE} (scope, embedder, bucket, question, vector, body, "
            "prompt_tokens, completion_tokens, usage_estimated, created_at, last_used) "
            "VALUES (%s, %s, %s, %s, %s::vector, '\\x7b7d', 1, 1, false, "
            "extract(epoch from now()), extract(epoch from now()))", rows,
        )  # fmt: skip
        db.execute(f"ANALYZE {TABLE}")
    samples = await _timed(lambda p, q: cache.lookup(ns, p, "question", q), vectors[:queries],
                           lambda i: f"p{i % parts}")  # fmt: skip
    await cache.aclose()
    return {"partitions": parts, "rows_per_partition": len(vectors) // parts,
            **_percentiles(samples)}  # fmt: skip


def _round_trip(url: str, queries: int) -> dict[str, float]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        samples = []
        for _ in range(queries):
            t = time.perf_counter()
            db.execute("SELECT 1").fetchone()
            samples.append(time.perf_counter() - t)
    return _percentiles(samples)


def _hnsw(url: str, vectors: np.ndarray, parts: int, queries: int) -> dict[str, Any]:
    """HNSW + the partition filter: latency and recall@1 against the exact partition search."""
    import psycopg

    from hybrid_gateway.cache.semantic.store_pg import vector_literal

    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f"DROP TABLE IF EXISTS {_HNSW}")
        db.execute(f"CREATE TABLE {_HNSW} (id BIGINT PRIMARY KEY, part TEXT NOT NULL, "
                   f"vector vector({DIM}) NOT NULL)")  # fmt: skip
        with db.cursor() as cur:
            cur.executemany(f"INSERT INTO {_HNSW} VALUES (%s, %s, %s::vector)",
                            [(i, f"p{i % parts}", vector_literal(v))
                             for i, v in enumerate(vectors)])  # fmt: skip
        started = time.perf_counter()
        db.execute(f"CREATE INDEX ON {_HNSW} USING hnsw (vector vector_ip_ops)")
        build_s = time.perf_counter() - started
        db.execute(f"ANALYZE {_HNSW}")
        db.execute("SET enable_seqscan = off")  # the index, as on a big table with small parts
        noise = np.random.default_rng(1).standard_normal((queries, DIM)).astype(np.float32)
        probes = vectors[:queries] + noise * 0.02  # each near one stored row (of partition i)
        samples, right, right_foreign = [], 0, 0
        for i, q in enumerate(probes):
            for own in (True, False):  # search partition i, or one where q has no near row
                part = i % parts if own else (i + 1) % parts
                mask = np.arange(len(vectors)) % parts == part
                truth = int(np.flatnonzero(mask)[np.argmax(vectors[mask] @ q)])
                t = time.perf_counter()
                row = db.execute(f"SELECT id FROM {_HNSW} WHERE part = %s "
                                 "ORDER BY vector <#> %s::vector LIMIT 1",
                                 (f"p{part}", vector_literal(q))).fetchone()  # fmt: skip
                samples.append(time.perf_counter() - t)
                found = row is not None and int(row[0]) == truth
                right, right_foreign = right + (own and found), right_foreign + (not own and found)
        db.execute(f"DROP TABLE {_HNSW}")
    return {"partitions": parts, "build_s": round(build_s, 2), "recall_at_1": right / queries,
            "recall_at_1_foreign": right_foreign / queries, **_percentiles(samples)}  # fmt: skip


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    vectors = _unit(np.random.default_rng(args.seed), args.entries)
    memory = await _memory(vectors, args.queries)
    print(f"memory lookup at {args.entries}: {memory}", flush=True)
    round_trip = _round_trip(args.postgres, args.queries)
    print(f"postgres round trip: {round_trip}", flush=True)
    exact, hnsw = [], []
    for parts in args.partitions:
        exact.append(await _postgres(args.postgres, vectors, parts, args.queries))
        print(f"postgres lookup, {parts} partition(s): {exact[-1]}", flush=True)
        hnsw.append(_hnsw(args.postgres, vectors, parts, args.queries))
        print(f"hnsw + filter, {parts} partition(s): {hnsw[-1]}", flush=True)
    return {"schema": "hybrid-gateway/bench-semantic-pg/1", "machine": _machine(),
            "entries": args.entries, "memory": memory, "round_trip": round_trip,
            "postgres": exact, "hnsw": hnsw}  # fmt: skip


def _markdown(result: dict[str, Any]) -> str:
    n = result["entries"]
    lines = ["# Semantic cache lookup: in-process vs PostgreSQL + pgvector", "",
             f"Machine: {result['machine']}", "", f"{n:,} entries, 384-d.", "",
             "recall@1: the true nearest row of the partition returned, for a query near a row of "
             "that partition / for a query near a row of another partition.", "",
             "| path | partitions | p50 ms | p99 ms | recall@1 | recall@1, near elsewhere |",
             "|---|---|---|---|---|---|",
             f"| in-process `SemanticCache.lookup` | 1 | {result['memory']['p50_ms']} | "
             f"{result['memory']['p99_ms']} | 1 (exact) | 1 (exact) |",
             f"| `SELECT 1` round trip | - | {result['round_trip']['p50_ms']} | "
             f"{result['round_trip']['p99_ms']} | - | - |"]  # fmt: skip
    for case in result["postgres"]:
        lines.append(f"| `PgSemanticCache.lookup` (exact in partition) | {case['partitions']} | "
                     f"{case['p50_ms']} | {case['p99_ms']} | 1 (exact) | 1 (exact) |")  # fmt: skip
    for case in result["hnsw"]:
        lines.append(
            f"| HNSW + partition filter (rejected) | {case['partitions']} | "
            f"{case['p50_ms']} | {case['p99_ms']} | {case['recall_at_1']:.3f} | "
            f"{case['recall_at_1_foreign']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    result = asyncio.run(_run(args))
    write_report(args.out, "semantic-pg-bench", result, _markdown(result))
    return 0
