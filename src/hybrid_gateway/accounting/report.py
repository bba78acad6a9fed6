"""Cost accounting from the request log: totals, cost per 1,000 requests, cache savings.

Every figure is a sum over request-log rows, so it is the same figure a bench computes from
the ``x-gateway-cost-usd`` of each answer (cost per 1k = sum of per-request costs / requests x
1000, errors and cache hits counted as requests of cost 0).  Savings are what the cache hits
would have cost on the channel they were routed to, at the prices of the time (``saved_usd``).

The log is a SQLite file opened read-only, or the shared PostgreSQL tables
(``stores.records: postgres``, ``accounting/log_source.py``); the SQL is the same on both but
for the ``day`` expression.  A running gateway moves rows in every ``flush_interval_ms``, so a
report sees everything but the last fraction of a second.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo

__all__ = [
    "DIMENSIONS",
    "NOT_HIT",
    "CostReport",
    "CostRow",
    "LogSource",
    "ReportError",
    "connect_log",
    "cost_report",
    "parse_instant",
    "sqlite_source",
]

# --by NAME -> SQL expression (NULLs from rows logged before routing, or by older versions).
DIMENSIONS: dict[str, str] = {
    "tenant": "coalesce(tenant, 'default')",
    "app": "coalesce(app, 'default')",
    "lane": "coalesce(lane, 'none')",
    "channel": "coalesce(channel, 'none')",
    "model": "coalesce(model, '')",
    "cache": "coalesce(cache, 'miss')",
    "status": "cast(status AS TEXT)",
    "day": "date(ts, 'unixepoch')",  # UTC
}
# The expressions that PostgreSQL spells differently.
_POSTGRES_DIMENSIONS = {"day": "to_char(to_timestamp(ts) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"}
# Cache outcomes that are not hits (the upstream answered, or the cache was off).
NOT_HIT = "('miss', 'bypass')"
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([mhdw])$")
_UNIT_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class ReportError(ValueError):
    """A bad argument or an unreadable log; the message says which."""


Query = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]


@dataclass(frozen=True, slots=True)
class LogSource:
    """A request log to read: ``query`` runs SQL written with ``?`` placeholders."""

    query: Query
    dialect: Literal["sqlite", "postgres"] = "sqlite"
    name: str = "the request log"  # for messages


@contextmanager
def sqlite_source(path: Path) -> Iterator[LogSource]:
    db = connect_log(path)
    try:
        yield LogSource(lambda sql, params: db.execute(sql, params).fetchall(), name=str(path))
    finally:
        db.close()


@dataclass(frozen=True, slots=True)
class CostRow:
    group: tuple[str, ...]
    requests: int
    answered: int  # 2xx
    cache_hits: int
    cost_usd: float
    saved_usd: float

    @property
    def cost_per_1k_usd(self) -> float:
        return self.cost_usd / self.requests * 1000.0 if self.requests else 0.0


@dataclass(frozen=True, slots=True)
class AuditCost:
    """What the audits of one stream (``router``, ``cache``) cost (learning/; not requests)."""

    kind: str
    audits: int
    cost_usd: float


@dataclass(frozen=True, slots=True)
class CostReport:
    by: tuple[str, ...]
    since: float
    until: float
    rows: tuple[CostRow, ...]
    total: CostRow
    # Audit spend in the window, by stream (empty: no audits table or none in the window).
    audit: tuple[AuditCost, ...] = ()


def parse_instant(text: str, now: float, zone: ZoneInfo) -> float:
    """``7d`` / ``12h`` / ``30m`` / ``2w`` before ``now``, or an ISO date/time in ``zone``."""
    match = _RELATIVE.match(text.strip())
    if match:
        return now - float(match.group(1)) * _UNIT_S[match.group(2)]
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ReportError(
            f"expected a duration back from now (7d, 12h, 30m, 2w) or a date such as "
            f"2026-11-01 or 2026-11-01T08:00, got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return moment.timestamp()


def count_if(condition: str) -> str:
    """1 where ``condition`` holds, else 0: summed, a count on SQLite and PostgreSQL alike
    (PostgreSQL cannot sum booleans)."""
    return f"CASE WHEN {condition} THEN 1 ELSE 0 END"


def connect_log(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise ReportError(f"no request log at {path}")
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        db.execute("SELECT ts, cost_usd, app, saved_usd FROM requests LIMIT 0")
    except sqlite3.Error as exc:
        raise ReportError(f"cannot read the request log {path}: {exc}") from None
    return db


def cost_report(log: Path | LogSource, since: float, until: float, by: Sequence[str]) -> CostReport:
    """The report over ``log``: a SQLite file, or an open source (``log_source.py``)."""
    if isinstance(log, Path):
        with sqlite_source(log) as source:
            return cost_report(source, since, until, by)
    unknown = [d for d in by if d not in DIMENSIONS]
    if unknown:
        raise ReportError(
            f"unknown --by {', '.join(unknown)} (choose from: {', '.join(DIMENSIONS)})"
        )
    spelled = {**DIMENSIONS, **(_POSTGRES_DIMENSIONS if log.dialect == "postgres" else {})}
    keys = [spelled[d] for d in by]
    select = ", ".join(
        [*keys, "count(*)", f"coalesce(sum({count_if('status BETWEEN 200 AND 299')}), 0)",
         f"coalesce(sum({count_if(f'cache NOT IN {NOT_HIT}')}), 0)",
         "coalesce(sum(cost_usd), 0.0)", "coalesce(sum(saved_usd), 0.0)"]
    )  # fmt: skip
    sql = f"SELECT {select} FROM requests WHERE ts >= ? AND ts < ?"
    if keys:
        sql += f" GROUP BY {', '.join(keys)} ORDER BY {', '.join(keys)}"
    result = log.query(sql, (since, until))
    n = len(keys)
    rows = tuple(
        CostRow(tuple(str(v) for v in r[:n]), int(r[n]), int(r[n + 1]), int(r[n + 2]),
                float(r[n + 3]), float(r[n + 4]))
        for r in result
        if r[n]  # no-group query over no rows gives one row of zeros
    )  # fmt: skip
    total = CostRow(
        (),
        sum(r.requests for r in rows),
        sum(r.answered for r in rows),
        sum(r.cache_hits for r in rows),
        sum(r.cost_usd for r in rows),
        sum(r.saved_usd for r in rows),
    )
    return CostReport(tuple(by), since, until, rows, total, audit_costs(log, since, until))


_HAS_AUDITS = {
    "sqlite": "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'audits'",
    "postgres": "SELECT CASE WHEN to_regclass('audits') IS NULL THEN 0 ELSE 1 END",
}


def audit_costs(log: LogSource, since: float, until: float) -> tuple[AuditCost, ...]:
    """The ``audits`` table's cost in ``[since, until)`` by stream; () for a log without one."""
    (found,) = log.query(_HAS_AUDITS[log.dialect], ())
    if not found[0]:
        return ()
    sql = (
        "SELECT kind, count(*), coalesce(sum(cost_usd), 0.0) FROM audits "
        "WHERE ts >= ? AND ts < ? GROUP BY kind ORDER BY kind"
    )
    return tuple(AuditCost(str(k), int(n), float(c)) for k, n, c in log.query(sql, (since, until)))
