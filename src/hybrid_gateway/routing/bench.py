"""`hybrid-gateway bench routing`: how long a routing decision takes, p50/p99.

Three routers decide the same mixed questions (Chinese and English, short and long, code):

    forced             the client named a lane's model: a dictionary lookup (the baseline)
    rules              the config's rules only
    rules+classifier   the same rules, then the packaged classifier for what no rule decides

The request's embedding is computed before timing (the classifier's promise is <= 1 ms *beyond
the embedding*, which the semantic cache shares); one embedding is timed separately for scale.
Results: ``routing.json`` and ``routing.md`` under ``--out``, with each router's p50 as a ratio
of the baseline's, measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_gateway.api.schema import parse_chat_request
from hybrid_gateway.config import GatewayConfig, load_config
from hybrid_gateway.embedding.base import Embedder, Vector, namespace_of
from hybrid_gateway.embedding.lazy import LazyEmbedding, attach_embedding
from hybrid_gateway.routing.build import build_router
from hybrid_gateway.routing.dataset import bundled_embedder
from hybrid_gateway.routing.router import CLASSIFIER_RULE, GatewayRouter
from hybrid_gateway.routing.settings import DEFAULT_MODEL, ClassifierConfig
from hybrid_gateway.tools.cliargs import int_at_least
from hybrid_gateway.types import ChatRequest, RequestRecord

QUESTIONS = (
    "这个接口怎么调用?",
    "这个接口的鉴权原理是什么?请结合令牌刷新和双向TLS说明它的威胁模型。",
    "How do I install the CLI on Debian?",
    "Explain why the eigenvalues of a real symmetric matrix are real, with a proof.",
    "```python\ndef f(x):\n    return x * 2\n```\nWhy does this return a string for '3'?",
    "Summarise the trade-offs between optimistic and pessimistic locking in a bank ledger "
    "that must survive a data-centre failover, and when you would pick each. " * 3,
    "什么是向量数据库?",
    "Write a function to find the longest palindromic substring of a string.",
)


class _Precomputed:
    """An AsyncEmbedder answering from vectors computed before the timing starts."""

    def __init__(self, namespace: str, vectors: dict[str, Vector]) -> None:
        self._namespace = namespace
        self._vectors = vectors

    @property
    def namespace(self) -> str:
        return self._namespace

    async def embed_one(self, text: str) -> Vector:
        return self._vectors[text]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        default=Path("examples/gateway.yaml"),
        help="config whose rules are timed (default: %(default)s)",
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for the results")
    parser.add_argument(
        "--model",
        type=Path,
        help="classifier model file for rules+classifier (default: the packaged model)",
    )
    parser.add_argument(
        "--decisions",
        type=int_at_least(100),
        default=20_000,
        help="timed decisions per router (default: %(default)s)",
    )


async def _time(
    router: GatewayRouter, requests: Sequence[ChatRequest], records: Sequence[RequestRecord], n: int
) -> tuple[np.ndarray, list[str]]:
    out = np.empty(n)
    rules: list[str] = []
    for i in range(n):
        request, record = requests[i % len(requests)], records[i % len(records)]
        started = time.perf_counter_ns()
        decision = await router.route(request, record)
        out[i] = (time.perf_counter_ns() - started) / 1000
        rules.append(decision.rule)
    return out, rules


def _stats(micros: np.ndarray, rules: Sequence[str]) -> dict[str, Any]:
    return {
        "p50_us": round(float(np.percentile(micros, 50)), 2),
        "p99_us": round(float(np.percentile(micros, 99)), 2),
        "mean_us": round(float(micros.mean()), 2),
        "decisions": len(rules),
        "rules": dict(Counter(rules)),
    }


async def _measure(
    config: GatewayConfig, config_path: Path, embedder: Embedder, n: int, model: Path | None
) -> dict[str, Any]:
    vectors = dict(zip(QUESTIONS, embedder.embed(list(QUESTIONS)), strict=True))
    shared = _Precomputed(namespace_of(embedder), vectors)
    records: list[RequestRecord] = []
    for q in QUESTIONS:
        record = RequestRecord("bench", 0.0)
        lazy = LazyEmbedding(shared, q)
        await lazy.vector()  # computed before timing, as the semantic cache would have
        attach_embedding(record, lazy)
        records.append(record)

    def requests(model: str) -> list[ChatRequest]:
        return [parse_chat_request({"model": model, "messages": [{"role": "user", "content": q}]})
                for q in QUESTIONS]  # fmt: skip

    def variant(**routing: Any) -> GatewayRouter:
        changed = config.model_copy(update={"routing": config.routing.model_copy(update=routing)})
        return build_router(changed, config_path=config_path, embedder=shared)

    classifier = ClassifierConfig(model=DEFAULT_MODEL if model is None else str(model.resolve()))
    forced_model = next((m.id for m in config.models if m.lane is not None), "auto")
    routers = {
        "forced": (variant(), requests(forced_model)),
        "rules": (variant(classifier=None, exemplars=None), requests("auto")),
        "rules+classifier": (variant(classifier=classifier), requests("auto")),
    }
    results: dict[str, Any] = {}
    for name, (router, reqs) in routers.items():
        await _time(router, reqs, records, min(n, 1000))  # warm-up
        micros, rules = await _time(router, reqs, records, n)
        results[name] = _stats(micros, rules)
        if name == "rules+classifier":  # the decisions the classifier made, on their own
            mask = np.array([r == CLASSIFIER_RULE for r in rules])
            results["classifier decisions only"] = _stats(
                micros[mask], [r for r in rules if r == CLASSIFIER_RULE]
            )
    base = results["forced"]["p50_us"]
    for r in results.values():
        r["p50_vs_forced"] = round(r["p50_us"] / base, 2) if base else None
    started = time.perf_counter()
    for q in QUESTIONS:
        embedder.embed([q])
    embed_ms = (time.perf_counter() - started) * 1000 / len(QUESTIONS)
    return {"routers": results, "embedding_mean_ms": round(embed_ms, 2),
            "embedder": namespace_of(embedder), "questions": len(QUESTIONS),
            "classifier_model": classifier.model,
            "machine": f"{platform.machine()}, python {platform.python_version()}"}  # fmt: skip


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    report = asyncio.run(
        _measure(config, args.config, bundled_embedder(), args.decisions, args.model)
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "routing.json").write_text(json.dumps(report, indent=2, ensure_ascii=False))
    (args.out / "routing.md").write_text(markdown(report))
    print(markdown(report))
    return 0


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Routing decision latency",
        "",
        f"{report['questions']} questions, embedder {report['embedder']} "
        f"(embedding computed before timing; one embedding: {report['embedding_mean_ms']} ms); "
        f"classifier model: {report['classifier_model']}.",
        "",
        "| router | p50 µs | p99 µs | mean µs | p50 vs forced | decided by |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in report["routers"].items():
        by = ", ".join(f"{k} {v / r['decisions']:.0%}" for k, v in sorted(r["rules"].items()))
        lines.append(
            f"| {name} | {r['p50_us']} | {r['p99_us']} | {r['mean_us']} | "
            f"{r['p50_vs_forced']}x | {by} |"
        )
    return "\n".join(lines) + "\n"
