"""`hybrid-gateway cache report | pairs`: what the cache audits say, from the records store.

    cache report --config gateway.yaml [--since 7d] [--json]   false-hit bound per scope
    cache report --log var/requests.sqlite3
    cache pairs --from-log --config gateway.yaml --out audited.jsonl [--since 30d]
        the audited hits as labelled pairs (request question, cached question, same or not),
        for `cache calibrate --pairs audited.jsonl` / `cache eval` / `cache train-verifier`

Reads the ``audits`` table of the config's records store (its SQLite file, or the shared
PostgreSQL) or of a given SQLite file.  Errors are one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from zoneinfo import ZoneInfo

from hybrid_gateway.accounting.log_source import config_source
from hybrid_gateway.accounting.report import ReportError, parse_instant, sqlite_source
from hybrid_gateway.config import load_config
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.learning.labels import PAIR_KINDS, Label, read_labels
from hybrid_gateway.learning.report import render_summary, summarise, summary_json

__all__ = ["ACTIONS", "configure", "run"]

ACTIONS = ("report", "pairs")


def configure(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rep = sub.add_parser("report", help="false-hit bound per cache scope, from the audits")
    rep.add_argument("--config", type=Path, help="the gateway's config (its records store)")
    rep.add_argument("--log", type=Path, help="a request log SQLite file (instead of --config's)")
    rep.add_argument("--since", default="7d", help="7d, 24h, 30m, 2w or a UTC date (7d)")
    rep.add_argument("--json", action="store_true", help="print one JSON object")
    pairs = sub.add_parser("pairs", help="the audited hits as a labelled pair file")
    pairs.add_argument("--from-log", action="store_true", required=True,
                       help="read the cache audits of the records store")  # fmt: skip
    pairs.add_argument("--config", type=Path, help="the gateway's config (its records store)")
    pairs.add_argument("--log", type=Path, help="a request log SQLite file (instead)")
    pairs.add_argument("--since", default="30d", help="30d, 12h, or a UTC date (30d)")
    pairs.add_argument("--out", type=Path, required=True, help="the JSONL pair file to write")


def run(args: argparse.Namespace) -> int:
    try:
        labels = _labels(args)
        if args.action == "pairs":
            written = write_pairs(args.out, labels)
            print(f"wrote {args.out}: {written} audited pairs ({len(labels)} audits read)")
            return 0
    except (ReportError, ConfigError, OSError) as exc:
        print(f"hybrid-gateway cache {args.action}: {exc}", file=sys.stderr)
        return 2
    summary = summarise(labels)
    print(json.dumps(summary_json(summary)) if args.json else render_summary(summary))
    return 0


def _labels(args: argparse.Namespace) -> list[Label]:
    now = time.time()
    since = parse_instant(args.since, now, ZoneInfo("UTC"))
    if args.log is not None:
        with sqlite_source(args.log) as source:
            return read_labels(source, since, now + 1)
    if args.config is None:
        raise ReportError("give --config (its records store) or --log FILE")
    with config_source(load_config(args.config), args.config) as source:
        return read_labels(source, since, now + 1)


def write_pairs(path: Path, labels: list[Label]) -> int:
    """Cache and near-miss audits with a verdict and both questions stored, one JSON pair a
    line: ``label`` 1 (the entry's answer serves the question as well as a fresh one) or 0
    (``a_worse``)."""
    count = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for label in labels:
            if label.kind not in PAIR_KINDS or label.verdict is None:
                continue
            if not label.prompt or not label.cached_prompt:
                continue
            same = 0 if label.verdict == "a_worse" else 1
            row = {"text_a": label.prompt, "text_b": label.cached_prompt, "label": same}
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    if not count:
        raise ReportError("no cache audit with a verdict and both questions stored (needs "
                          "server.request_log.prompts: full or redacted)")  # fmt: skip
    return count
