"""`hybrid-gateway report cost`: requests, cost, cost per 1,000 requests and cache savings.

    hybrid-gateway report cost --config gateway.yaml --since 7d --by tenant,lane --csv cost.csv

Reads the request log the config names (its SQLite file, or the shared PostgreSQL table with
``stores.records: postgres``) or the SQLite file ``--log``; groups by any of tenant, app, lane,
channel, model, cache, status, day; prints a table with a total line, and writes the same rows
as CSV with ``--csv``.  Dates without a time zone are read in ``--tz`` (UTC).
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from hybrid_gateway.accounting.log_source import config_source
from hybrid_gateway.accounting.report import (
    DIMENSIONS,
    CostReport,
    CostRow,
    ReportError,
    cost_report,
    parse_instant,
)
from hybrid_gateway.config import load_config
from hybrid_gateway.errors import ConfigError

__all__ = ["configure", "render", "run", "write_csv"]

_FIGURES = ("requests", "answered", "cache_hits", "cost_usd", "cost_per_1k_usd", "saved_usd")


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="report_command", metavar="REPORT", required=True)
    cost = sub.add_parser("cost", help="cost and cost per 1,000 requests from the request log")
    cost.add_argument("--config", help="the gateway's config (for the request log's path)")
    cost.add_argument("--log", type=Path, help="a request log file (instead of --config's)")
    cost.add_argument("--since", default="7d", help="7d, 24h, 30m, 2w or a date (7d)")
    cost.add_argument("--until", help="same forms (now)")
    cost.add_argument("--tz", default="UTC", help="time zone of dates without one (UTC)")
    cost.add_argument(
        "--by", default="tenant", help=f"comma-separated, of: {', '.join(DIMENSIONS)} (tenant)"
    )
    cost.add_argument("--csv", type=Path, help="also write the rows to this CSV file")


def run(args: argparse.Namespace) -> int:
    try:
        report = _report(args)
    except (ReportError, ConfigError) as exc:
        print(f"hybrid-gateway report cost: {exc}", file=sys.stderr)
        return 2
    print(render(report))
    if args.csv is not None:
        write_csv(args.csv, report)
        print(f"wrote {args.csv}", file=sys.stderr)
    return 0


def _report(args: argparse.Namespace) -> CostReport:
    try:
        zone = ZoneInfo(args.tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ReportError(f"--tz: an IANA time zone such as UTC, got {args.tz!r}") from None
    if args.log is None and args.config is None:
        raise ReportError("give --config (its request log) or --log FILE")
    now = time.time()
    since = parse_instant(args.since, now, zone)
    until = now + 1 if args.until is None else parse_instant(args.until, now, zone)
    by = [d.strip() for d in args.by.split(",") if d.strip()]
    if args.log is not None:
        return cost_report(args.log, since, until, by)
    # the config's log: its SQLite file, or the shared PostgreSQL table (stores.records)
    with config_source(load_config(args.config), args.config) as source:
        return cost_report(source, since, until, by)


def _figures(row: CostRow, money: str = ".6f") -> list[str]:
    """Counts, then money: 6 decimals in the table, full precision (``repr``) in the CSV."""
    amounts = (row.cost_usd, row.cost_per_1k_usd, row.saved_usd)
    return [str(row.requests), str(row.answered), str(row.cache_hits),
            *(format(a, money) if money else repr(a) for a in amounts)]  # fmt: skip


def _utc(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def render(report: CostReport) -> str:
    header = [*report.by, *_FIGURES]
    rows = [[*r.group, *_figures(r)] for r in report.rows]
    label = ["total", *[""] * (len(report.by) - 1)] if report.by else []
    total = [*label, *_figures(report.total)]
    table = [header, *rows, total]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    n = len(report.by)

    def line(row: list[str]) -> str:
        pairs = enumerate(zip(row, widths, strict=True))
        cells = [c.ljust(w) if i < n else c.rjust(w) for i, (c, w) in pairs]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    out = [f"request log {_utc(report.since)} .. {_utc(report.until)}", line(header), rule]
    out += [line(row) for row in rows]
    out += [rule, line(total)]
    for audit in report.audit:  # learning.audit's shadow answers and judge calls
        out.append(f"audit {audit.kind}: {audit.audits} audits, {audit.cost_usd:.6f} USD "
                   "(not in the rows above)")  # fmt: skip
    return "\n".join(out)


def write_csv(path: Path, report: CostReport) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([*report.by, *_FIGURES])
        for row in report.rows:
            writer.writerow([*row.group, *_figures(row, money="")])
