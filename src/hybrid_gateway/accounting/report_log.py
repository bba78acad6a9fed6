"""`plan breakeven --from-log`: the routed shares and tokens per request, measured in the log.

The break-even needs three measured figures: the share of requests the cache answers, the share
of the rest that goes to the API (the heavy lanes), and the tokens a request takes.  A bench
result has the first two (``--from-bench``); the request log has all three, for real traffic:
successful requests in the window, cache hits over all of them, heavy-lane requests over those
answered upstream, and the mean prompt and completion tokens of the upstream answers.
Figures given on the command line win over measured ones.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from hybrid_gateway.accounting.report import (
    NOT_HIT,
    LogSource,
    ReportError,
    count_if,
    parse_instant,
    sqlite_source,
)
from hybrid_gateway.accounting.vram import PlanError

__all__ = ["LogShares", "describe_log", "fill_from_log", "log_dict", "shares_from_log"]


@dataclass(frozen=True, slots=True)
class LogShares:
    requests: int  # successful requests in the window
    cache_hits: int
    light_requests: int  # answered upstream by a lane not in heavy_lanes
    heavy_requests: int  # answered upstream by one of heavy_lanes
    tokens_in: float  # mean prompt tokens of upstream answers
    tokens_out: float  # mean completion tokens of upstream answers
    since: float = 0.0
    heavy_lanes: tuple[str, ...] = ("heavy",)

    @property
    def heavy_share(self) -> float:
        upstream = self.light_requests + self.heavy_requests
        return self.heavy_requests / upstream if upstream else 0.0

    @property
    def cache_hit_rate(self) -> float:
        return self.cache_hits / self.requests if self.requests else 0.0


def shares_from_log(
    log: Path | LogSource,
    since: float,
    until: float | None = None,
    heavy_lanes: Sequence[str] = ("heavy",),
) -> LogShares:
    """Successful, routed requests in ``[since, until)`` of a SQLite file or an open source."""
    if isinstance(log, Path):
        with sqlite_source(log) as source:
            return shares_from_log(source, since, until, heavy_lanes)
    until = time.time() + 1 if until is None else until
    lanes = tuple(heavy_lanes)
    marks = ", ".join("?" for _ in lanes) or "NULL"
    upstream = f"cache IN {NOT_HIT}"
    sql = f"""
        SELECT count(*),
               coalesce(sum({count_if(f"cache NOT IN {NOT_HIT}")}), 0),
               coalesce(sum({count_if(f"{upstream} AND lane NOT IN ({marks})")}), 0),
               coalesce(sum({count_if(f"{upstream} AND lane IN ({marks})")}), 0),
               avg(CASE WHEN {upstream} THEN prompt_tokens END),
               avg(CASE WHEN {upstream} THEN completion_tokens END)
        FROM requests
        WHERE ts >= ? AND ts < ? AND status BETWEEN 200 AND 299 AND lane IS NOT NULL
    """
    (row,) = log.query(sql, (*lanes, *lanes, since, until))
    requests, hits, light, heavy, tokens_in, tokens_out = row
    if not light and not heavy:
        raise ReportError(f"{log.name}: no request was answered upstream in the window")
    return LogShares(
        int(requests), int(hits), int(light), int(heavy),
        float(tokens_in or 0.0), float(tokens_out or 0.0), since, lanes,
    )  # fmt: skip


def fill_from_log(args: argparse.Namespace) -> LogShares:
    """Measure the log named by ``--from-log``; fill the figures the command line left out."""
    lanes = [lane.strip() for lane in args.heavy_lanes.split(",") if lane.strip()]
    try:
        since = parse_instant(args.since, time.time(), ZoneInfo("UTC"))
        shares = shares_from_log(args.from_log, since, heavy_lanes=lanes)
    except ReportError as exc:
        raise PlanError(str(exc)) from None
    if args.tokens_in is None:
        args.tokens_in = shares.tokens_in
    if args.tokens_out is None:
        args.tokens_out = shares.tokens_out
    if args.heavy_share is None:
        args.heavy_share = shares.heavy_share
    if args.cache_hit_rate is None:
        args.cache_hit_rate = shares.cache_hit_rate
    return shares


def log_dict(shares: LogShares) -> dict[str, Any]:
    return {
        "since": shares.since,
        "requests": shares.requests,
        "cache_hits": shares.cache_hits,
        "light_requests": shares.light_requests,
        "heavy_requests": shares.heavy_requests,
        "heavy_lanes": list(shares.heavy_lanes),
        "tokens_in": shares.tokens_in,
        "tokens_out": shares.tokens_out,
    }


def describe_log(shares: LogShares) -> str:
    return (
        f"from log        {shares.requests} requests: {shares.cache_hits} cache hits, "
        f"light {shares.light_requests}, heavy {shares.heavy_requests} "
        f"({'+'.join(shares.heavy_lanes)}); {shares.tokens_in:.0f} tokens in, "
        f"{shares.tokens_out:.0f} out per upstream answer"
    )
