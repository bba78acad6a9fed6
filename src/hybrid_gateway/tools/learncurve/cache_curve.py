"""The cache curve: a paraphrase-heavy workload through the bundled semantic calibration and
through a threshold that follows the cache audits; then ``cache eval`` on held-out pairs.

Both gateways serve every request from the light lane with the exact cache and
examples/gateway-full.yaml's semantic block (guards, embedder, cascade) at the package's default
threshold (0.995: the bundled model calibrated to 95 % precision on LCQMC), with no time limit
on e5's confirmation (no ``embedder_slow`` bypass: the curve measures the rule); both audit
``rate`` of their semantic hits with the ``marks`` judge, and only the second has
``learning.cache_threshold`` on (starting from the same threshold).  The workload is sent in
order in chunks; after each chunk the figures so far are recorded: labels bought (cache
verdicts), hits and false hits served (an answer marked with another question's group), the
gateway's threshold and false-hit bound.  Held-out check: pair files of ``../shared/data``
less every pair with a question the run sent, through ``cache eval --curve-out``; the
rows at the bundled and the learned thresholds are read off its TEST curve.  With ``unseen``,
a second workload whose questions the runs never sent is served twice more, at the bundled and
at the learned run's final threshold, fixed: the hits the learned threshold serves once it is
learned (issue 23's goal), on questions its audits never saw.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hybrid_gateway.cache.semantic.pairs import load_pairs
from hybrid_gateway.cache.semantic.settings import SemanticCacheConfig
from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.learncurve.scoring import cache_tally, curve_at
from hybrid_gateway.tools.learncurve.stack import (
    audit_count,
    base_config,
    full_config,
    metrics,
    running,
    send,
    settled_audits,
)
from hybrid_gateway.tools.workload.schema import last_user_text, read_workload

__all__ = ["CacheSettings", "held_out_eval", "run_cache_curve"]

JsonDict = dict[str, Any]
THRESHOLD = "hybrid_gateway_cache_threshold"
BOUND = "hybrid_gateway_cache_false_hit_bound"


@dataclass(frozen=True)
class CacheSettings:
    folder: Path
    workload: Path
    rate: float  # learning.audit.cache.rate
    target_precision: float  # learning.cache_threshold.target_precision
    min_audits: int = 20
    step: float = 0.005
    hold_s: float = 1.0
    min_threshold: float = 0.9
    concurrency: int = 8
    chunk: int = 100
    threshold: float = SemanticCacheConfig.model_fields["threshold"].default  # the bundled one
    near_rate: float = 1.0  # learning.audit.near_miss.rate of the learned run (0: none)
    near_margin: float = 0.05
    unseen: Path | None = None  # a workload never sent, served at both final thresholds


def cache_config(
    folder: Path, upstreams: Mapping[str, str], s: CacheSettings, learn: bool
) -> JsonDict:
    full = full_config()
    config = base_config(folder, upstreams)
    semantic = {**full["cache"]["semantic"], "path": str(folder / "semantic-cache.sqlite3"),
                "write_behind": False, "threshold": s.threshold, "target_precision": 0.95,
                "calibrated_on": "the package default"}  # fmt: skip
    if "cascade" in semantic:  # e5 confirms every plausible hit however long it takes: the
        # curve measures the rule, and a 200 ms budget on a loaded 2-core machine turned a
        # sixth of the requests into `embedder_slow` bypasses (513 of 3,000, 2026-12-07)
        semantic["cascade"] = {**semantic["cascade"], "confirm_timeout_ms": None}
    config["cache"] = {"exact": {"enabled": True}, "semantic": semantic}
    config["embedding"] = full["embedding"]
    config["learning"] = {"audit": {
        "enabled": True, "judge": {"kind": "marks"}, "max_in_flight": 16,
        "cache": {"rate": s.rate, "daily_usd_per_tenant": 1.0e6},
    }}  # fmt: skip
    if learn:
        if s.near_rate > 0:
            config["learning"]["audit"]["near_miss"] = {
                "rate": s.near_rate, "daily_usd_per_tenant": 1.0e6, "margin": s.near_margin,
            }  # fmt: skip
        config["learning"]["cache_threshold"] = {
            "enabled": True, "target_precision": s.target_precision, "min_audits": s.min_audits,
            "step": s.step, "hold_s": s.hold_s, "min_threshold": s.min_threshold,
            "max_threshold": 1.0,
        }  # fmt: skip
    return config


def run_cache_curve(s: CacheSettings) -> JsonDict:
    runs = {}
    for name, learn in (("bundled", False), ("learned", True)):
        runs[name] = _one_run(s, s.folder / name, learn)
    out = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(s).items()},
           "bundled_threshold": s.threshold, "runs": runs}  # fmt: skip
    learned = runs["learned"]["final_threshold"]
    if s.unseen is not None and learned is not None:
        out["unseen"] = serve_unseen(s, {"bundled": s.threshold, "learned": learned})
    return out


def serve_unseen(s: CacheSettings, thresholds: Mapping[str, float]) -> JsonDict:
    """The workload ``s.unseen`` (no question of it sent before) served at each threshold,
    fixed (no audits, no learning): what the learned threshold serves once learned, against
    the bundled one, on the same questions."""
    assert s.unseen is not None
    out = {}
    for name, threshold in thresholds.items():
        fixed = replace(s, workload=s.unseen, threshold=threshold, rate=0.0, near_rate=0.0)
        run = _one_run(fixed, s.folder / "unseen" / name, learn=False)
        out[name] = {"threshold": threshold, **run["total"]}
    return out


def _one_run(s: CacheSettings, folder: Path, learn: bool) -> JsonDict:
    items = read_workload(s.workload)
    groups = {i.id: i.labels.group for i in items}
    log = folder / "requests.sqlite3"
    results: list[RequestResult] = []
    series: list[JsonDict] = []
    make = lambda ups: cache_config(folder, ups, s, learn)  # noqa: E731
    with running(folder, s.workload, make) as gw:
        for start in range(0, len(items), s.chunk):
            chunk = send(gw.url, items[start : start + s.chunk], s.concurrency)
            results += chunk
            scraped = metrics(gw.url)
            series.append({
                "requests": len(results), "labels": audit_count(log, "cache"),
                "near_miss_labels": audit_count(log, "near_miss"),
                **cache_tally(results, groups).as_json(),
                "chunk_hit_rate": round(cache_tally(chunk, groups).hit_rate, 4),
                "threshold": scraped.get(THRESHOLD),
                "bound": min((v for k, v in scraped.items() if k.startswith(BOUND)), default=None),
            })  # fmt: skip
        labels = settled_audits(log, "cache")
        near_labels = settled_audits(log, "near_miss")
        final = metrics(gw.url)
    print(f"cache curve ({folder.name}): {series[-1]}", file=sys.stderr)
    return {
        "total": cache_tally(results, groups).as_json(),
        "labels": labels,
        "near_miss_labels": near_labels,
        "final_threshold": final.get(THRESHOLD),
        "audit_usd": sum(v for k, v in final.items() if k.startswith("hybrid_gateway_audit_cost")),
        "series": series,
    }


def sent_texts(workload: Path) -> set[str]:
    return {last_user_text(i.messages).strip() for i in read_workload(workload)}


def held_out_eval(
    files: Sequence[Path], workload: Path, folder: Path, thresholds: Mapping[str, float],
    sample: int, embed_cache: Path | None,
) -> list[JsonDict]:  # fmt: skip
    """``cache eval`` on each pair file less the pairs with a question the run sent; the TEST
    curve's rows at each of ``thresholds`` (name -> threshold)."""
    from hybrid_gateway.cli import main

    sent = sent_texts(workload)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for path in files:
        kept = [p for p in load_pairs(path, limit=sample) if p.a.strip() not in sent
                and p.b.strip() not in sent]  # fmt: skip
        held = folder / f"{path.stem}-held-out.jsonl"
        held.write_text("".join(json.dumps({"text_a": p.a, "text_b": p.b, "label": int(p.same)},
                                           ensure_ascii=False) + "\n" for p in kept))  # fmt: skip
        argv = ["cache", "eval", "--pairs", str(held), "--split-seed", "7", "--json",
                "--curve-out", str(folder)]  # fmt: skip
        if embed_cache is not None:
            argv += ["--embeddings-cache", str(embed_cache)]
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = main(argv)
        summary = json.loads(printed.getvalue()) if code == 0 else None
        curve = folder / f"{held.stem}-curve.csv"
        out.append({
            "file": path.name, "pairs": len(kept), "exit": code,
            "auc": None if summary is None else summary.get("auc"),
            "at": {name: curve_at(curve, t) if curve.exists() else None
                   for name, t in thresholds.items()},
        })  # fmt: skip
    return out
