"""`hybrid-gateway misroutes`: the weekly misroute review.

    hybrid-gateway misroutes --config gateway.yaml --since 7d [--out DIR] [--json] [--apply N]

Reads the request log (and its feedback) the config names: the SQLite file, or the shared
PostgreSQL tables with ``stores.records: postgres``.  Writes ``misroutes.md`` and
``misroutes.html`` under ``--out``, prints the Markdown (or, with ``--json``, one JSON object),
and with ``--apply N`` writes proposal N into the config (``<config>.bak`` kept, the result
validated first).  The running gateway picks the change up on reload (SIGHUP or
``POST /admin/reload``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from zoneinfo import ZoneInfo

from hybrid_gateway.accounting.log_source import connect_records
from hybrid_gateway.accounting.report import ReportError, connect_log, parse_instant
from hybrid_gateway.config import GatewayConfig, load_config, resolve_path
from hybrid_gateway.embedding.factory import build_embedder
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.review.analysis import Review, run_review
from hybrid_gateway.review.cluster import CLUSTER_SIMILARITY
from hybrid_gateway.review.collect import ReviewError, check_mode
from hybrid_gateway.review.proposals import apply_edits
from hybrid_gateway.review.reader import LogReader
from hybrid_gateway.review.report import as_json, markdown, write_report
from hybrid_gateway.review.vectors import PromptVectors
from hybrid_gateway.routing.config_edit import replace_config_file
from hybrid_gateway.tools.cliargs import int_at_least

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, required=True, help="the gateway's config")
    parser.add_argument("--since", default="7d", help="7d, 24h, 30m, 2w or an ISO date (7d)")
    parser.add_argument("--until", help="same forms (now)")
    parser.add_argument(
        "--out", type=Path, default=Path("out/misroutes"),
        help="folder for misroutes.md and misroutes.html (%(default)s)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--apply", type=int_at_least(1), metavar="N",
                        help="write proposal N of this review into the config")  # fmt: skip
    parser.add_argument(
        "--cluster-similarity", type=float, default=CLUSTER_SIMILARITY,
        help="cosine at which flagged questions share a cluster (%(default)s)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
        review = asyncio.run(_review(args, config))
    except (ConfigError, ReviewError, ReportError) as exc:
        print(f"hybrid-gateway misroutes: {exc}", file=sys.stderr)
        return 2
    data = as_json(review)
    md, page = write_report(args.out, data)
    print(json.dumps(data, ensure_ascii=False) if args.json else markdown(data))
    print(f"wrote {md} and {page}", file=sys.stderr)
    return 0 if args.apply is None else apply(review, args.apply, args.config)


async def _review(args: argparse.Namespace, config: GatewayConfig) -> Review:
    now = time.time()
    since = parse_instant(args.since, now, ZoneInfo("UTC"))
    until = now + 1 if args.until is None else parse_instant(args.until, now, ZoneInfo("UTC"))
    check_mode(config.server.request_log.prompts, str(args.config))  # before the embedder
    reader, close = open_reader(config, Path(args.config))
    embedder = build_embedder(config.embedding, args.config)
    try:
        return await run_review(
            config, Path(args.config), reader, (since, until), PromptVectors(embedder),
            similarity=args.cluster_similarity,
        )  # fmt: skip
    finally:
        await embedder.aclose()
        close()


def open_reader(config: GatewayConfig, path: Path) -> tuple[LogReader, Callable[[], None]]:
    """A reader over the log ``config`` (at ``path``) names, and what closes it."""
    if config.stores.records == "sqlite":
        db = connect_log(resolve_path(path, config.server.request_log.path))
        return LogReader(db), db.close
    conn = connect_records(config, path)
    return LogReader(conn, marker="%s"), conn.close


def apply(review: Review, number: int, path: Path) -> int:
    chosen = next((r for r in review.ranked if r.number == number), None)
    if chosen is None:
        print(f"hybrid-gateway misroutes: --apply {number}: this review has "
              f"{len(review.ranked)} proposals", file=sys.stderr)  # fmt: skip
        return 2
    text = apply_edits(path.read_text(encoding="utf-8"), chosen.proposal.edits)
    try:
        backup = replace_config_file(path, text)
    except ConfigError as exc:
        print(f"hybrid-gateway misroutes: not written: {exc}", file=sys.stderr)
        return 2
    print(f"applied proposal {number} ({chosen.proposal.title}) to {path} "
          f"(previous version: {backup})", file=sys.stderr)  # fmt: skip
    print("reload the gateway to use it: kill -HUP <gateway pid>, or "
          "POST /admin/reload with the admin key", file=sys.stderr)  # fmt: skip
    return 0
