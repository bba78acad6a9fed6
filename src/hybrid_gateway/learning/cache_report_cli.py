"""`hybrid-gateway cache report`: the semantic cache's false-hit bound per scope, from audits.

    cache report --config gateway.yaml [--since 7d] [--json]
    cache report --log var/requests.sqlite3

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
from hybrid_gateway.learning.labels import read_labels
from hybrid_gateway.learning.report import AuditSummary, render_summary, summarise, summary_json

__all__ = ["configure", "run"]


def configure(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rep = sub.add_parser("report", help="false-hit bound per cache scope, from the audits")
    rep.add_argument("--config", type=Path, help="the gateway's config (its records store)")
    rep.add_argument("--log", type=Path, help="a request log SQLite file (instead of --config's)")
    rep.add_argument("--since", default="7d", help="7d, 24h, 30m, 2w or a UTC date (7d)")
    rep.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    try:
        summary = _summary(args)
    except (ReportError, ConfigError) as exc:
        print(f"hybrid-gateway cache report: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary_json(summary)) if args.json else render_summary(summary))
    return 0


def _summary(args: argparse.Namespace) -> AuditSummary:
    now = time.time()
    since = parse_instant(args.since, now, ZoneInfo("UTC"))
    if args.log is not None:
        with sqlite_source(args.log) as source:
            return summarise(read_labels(source, since, now + 1))
    if args.config is None:
        raise ReportError("give --config (its records store) or --log FILE")
    with config_source(load_config(args.config), args.config) as source:
        return summarise(read_labels(source, since, now + 1))
