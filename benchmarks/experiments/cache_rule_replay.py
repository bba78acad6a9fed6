"""Replay a paraphrase workload through gateways that differ only in their semantic-cache rule.

    python benchmarks/experiments/cache_rule_replay.py --workload W.jsonl --out DIR \
        --rule bundled= --rule reranker=calibrated.yaml [--concurrency 8]

Each ``--rule NAME=CONFIG`` serves the workload, in order, from the light lane with the exact
cache and ``bench learn``'s cache setup (examples/gateway-full.yaml's semantic block at the
package's threshold, no audits, no learning); a CONFIG file's ``cache.semantic`` keys
(threshold, reranker, verifier, guards) replace those of the block, an empty CONFIG keeps it;
``--no-cascade`` drops the static pre-filter (whose bound is set for the bundled threshold, so
it would refuse most candidates of a rule with a lower cosine floor).
Prints and writes ``DIR/replay.json``: per rule the semantic hits and false hits (the answer's
quality mark names another question's group), as ``bench learn``'s cache curve counts them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from hybrid_gateway.tools.learncurve.cache_curve import CacheSettings, cache_config
from hybrid_gateway.tools.learncurve.scoring import cache_tally
from hybrid_gateway.tools.learncurve.stack import running, send
from hybrid_gateway.tools.workload.schema import read_workload

KEYS = ("threshold", "reranker", "verifier", "guards", "target_precision", "calibrated_on")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rule", action="append", required=True, help="NAME=CONFIG (or NAME=)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--no-cascade", action="store_true",
                        help="e5 embeds every question (no static pre-filter) in every rule")
    args = parser.parse_args()
    items = read_workload(args.workload)
    groups = {i.id: i.labels.group for i in items}
    report: dict[str, Any] = {"workload": str(args.workload), "rules": {}}
    for spec in args.rule:
        name, _, path = spec.partition("=")
        override = _semantic_of(Path(path)) if path else {}
        folder = args.out / name
        settings = CacheSettings(folder, args.workload.resolve(), 0.0, 0.95)

        def make(ups: Any, folder: Path = folder, settings: CacheSettings = settings,
                 override: dict[str, Any] = override) -> dict[str, Any]:  # fmt: skip
            config = cache_config(folder, ups, settings, learn=False)
            del config["learning"]
            semantic = config["cache"]["semantic"]
            if args.no_cascade:
                semantic.pop("cascade", None)
            if override:
                for key in ("verifier", "reranker"):
                    semantic.pop(key, None)
                semantic.update(override)
            return config

        with running(folder, args.workload.resolve(), make) as gw:
            results = send(gw.url, items, args.concurrency)
        tally = cache_tally(results, groups).as_json()
        report["rules"][name] = {"config": path or None, **{k: override.get(k) for k in
                                 ("threshold", "reranker") if k in override}, **tally}  # fmt: skip
        print(name, json.dumps(report["rules"][name], ensure_ascii=False), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "replay.json").write_text(json.dumps(report, indent=2, ensure_ascii=False))


def _semantic_of(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    semantic = loaded["cache"]["semantic"]
    out = {k: semantic[k] for k in KEYS if k in semantic}
    reranker = out.get("reranker")
    if isinstance(reranker, dict) and "path" in reranker:
        reranker["path"] = str((path.parent / reranker["path"]).resolve())
    return out


if __name__ == "__main__":
    main()
