"""Route a workload's questions through a config's real router, offline, and score the lanes.

    python benchmarks/experiments/router_through_rules.py --workload calib/cal.jsonl \
        --config examples/gateway-full.yaml [--sweep]

Each distinct question (first item of its paraphrase group) is routed by ``GatewayRouter`` as the
config builds it (gates, rules, the e5 classifier; the static cascade is left out: offline, the
classifier alone decides what reaches it).  The workload's labels say whether the light and the
heavy model answer it well, so each decision is scored: per rule, how many questions, how many
complex ones it sent light, and the quality had every question gone where it was sent.  With
``--sweep``, the classifier's threshold is swept with the rules in force: end-to-end quality and
heavy share per threshold, the curve ``router calibrate --through-rules`` chooses on.
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from hybrid_gateway.config import load_config
from hybrid_gateway.embedding.base import namespace_of
from hybrid_gateway.embedding.disk_cache import DiskEmbeddingCache
from hybrid_gateway.embedding.lazy import LazyEmbedding, attach_embedding
from hybrid_gateway.routing.build import build_router
from hybrid_gateway.routing.dataset import DEFAULT_EMBED_CACHE, bundled_embedder
from hybrid_gateway.tools.workload.schema import read_workload
from hybrid_gateway.types import ChatRequest, RequestRecord


class _Async:
    """The bundled e5, async, with vectors kept in var/embeddings.sqlite3 across runs."""

    def __init__(self, embedder):  # type: ignore[no-untyped-def]
        self._e = embedder
        self.namespace = namespace_of(embedder)
        self._disk = DiskEmbeddingCache(DEFAULT_EMBED_CACHE, self.namespace)

    async def embed(self, texts):  # type: ignore[no-untyped-def]
        return self._disk.embed(texts, self._e.embed)

    async def embed_one(self, text):  # type: ignore[no-untyped-def]
        return self._disk.embed([text], self._e.embed)[0]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", type=Path, required=True)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--show", default="", help="a rule whose complex-sent-light to print")
    args = parser.parse_args()
    config = load_config(args.config)
    embedder = bundled_embedder()
    vectors = _Async(embedder)
    router = build_router(config, config_path=args.config, embedder=vectors)
    heavy = config.routing.complex_lane
    seen: set[str] = set()
    rows = []
    items = list(read_workload(args.workload))
    sent = Counter(item.labels.group for item in items)  # a repeat gets its first answer (cache)
    for item in items:
        if item.labels.group in seen:
            continue
        seen.add(item.labels.group)
        body = {"model": "auto", "messages": [dict(m) for m in item.messages]}
        chat = ChatRequest("auto", body["messages"], stream=False, include_usage=False, body=body)
        record = RequestRecord(item.id, 0.0, model="auto", tenant="default")
        text = str(item.messages[-1]["content"])
        attach_embedding(record, LazyEmbedding(vectors, text))
        d = await router.route(chat, record)
        rows.append((d.rule, d.lane == heavy, d.score, item.labels, text))
    by_rule: dict[str, Counter[str]] = defaultdict(Counter)
    for rule, to_heavy, _p, labels, _t in rows:
        c = by_rule[rule.split("@")[0]]
        c["n"] += 1
        c["heavy"] += to_heavy
        c["complex"] += labels.complexity == "complex"
        c["complex_light"] += labels.complexity == "complex" and not to_heavy
        c["ok"] += labels.heavy_ok if to_heavy else labels.light_ok
        c["heavy_ok"] += labels.heavy_ok
    n = len(rows)
    print(f"{n} distinct questions; heavy-only quality "
          f"{sum(r[3].heavy_ok for r in rows) / n:.2%}, routed quality "
          f"{sum((r[3].heavy_ok if r[1] else r[3].light_ok) for r in rows) / n:.2%}, heavy share "
          f"{sum(r[1] for r in rows) / n:.1%}")
    w = [sent[r[3].group] for r in rows]
    bench = [r[1] or r[3].light_ok or not r[3].heavy_ok for r in rows]  # bench run's quality
    print(f"bench-style quality (heavy's answer or as good): distinct {sum(bench) / n:.2%}, "
          f"per request {sum(k * b for k, b in zip(w, bench)) / sum(w):.2%}")
    print(f"per request ({sum(w)} requests): heavy-only quality "
          f"{sum(k * r[3].heavy_ok for k, r in zip(w, rows)) / sum(w):.2%}, routed quality "
          f"{sum(k * (r[3].heavy_ok if r[1] else r[3].light_ok) for k, r in zip(w, rows)) / sum(w):.2%}, "
          f"heavy share {sum(k * r[1] for k, r in zip(w, rows)) / sum(w):.1%}")
    print(f"{'rule':32} {'n':>5} {'heavy':>6} {'complex':>7} {'cx->light':>9} {'ok':>6} {'heavy_ok':>8}")
    for rule, c in sorted(by_rule.items(), key=lambda kv: -kv[1]["n"]):
        print(f"{rule:32} {c['n']:5} {c['heavy']:6} {c['complex']:7} {c['complex_light']:9} "
              f"{c['ok'] / c['n']:6.1%} {c['heavy_ok'] / c['n']:8.1%}")
    src = Counter((r[3].source, r[0].split("@")[0]) for r in rows
                  if r[3].complexity == "complex" and not r[1])
    print("complex questions sent light, by source and rule:")
    for (source, rule), k in src.most_common(15):
        print(f"  {k:4}  {source:24} {rule}")
    if args.show:
        for rule, to_heavy, p, labels, text in rows:
            if rule.startswith(args.show) and labels.complexity == "complex" and not to_heavy:
                print(f"  [{labels.source}] p={p} {text[:120]!r}")
    if args.sweep:
        fixed = [r for r in rows if not r[0].startswith("classifier")]
        learned = [r for r in rows if r[0].startswith("classifier")]
        ok_fixed = sum((r[3].heavy_ok if r[1] else r[3].light_ok) for r in fixed)
        heavy_fixed = sum(r[1] for r in fixed)
        ps = np.array([r[2] for r in learned])
        for t in np.linspace(0.05, 0.95, 19):
            to_heavy = ps >= t
            ok = ok_fixed + sum((r[3].heavy_ok if h else r[3].light_ok)
                                for r, h in zip(learned, to_heavy))
            print(f"  t={t:.2f} heavy {(heavy_fixed + to_heavy.sum()) / n:6.1%} "
                  f"quality {ok / n:6.2%}")


if __name__ == "__main__":
    asyncio.run(main())
