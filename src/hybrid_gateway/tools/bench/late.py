"""Late deliveries: the slow lane's answers that finished after a deadline fallback.

The client of such a request got the fallback lane's answer (``x-gateway-fallback: timeout``);
the slow lane kept generating, and the gateway logged its answer as a row of its own,
``{request_id}.late`` with ``fallback = late`` (docs/resilience.md).  The bench reads those rows
from the gateway's request log once the gateway has stopped (so every background request has
finished or been cancelled and logged) and joins them to the stage whose client row carries the
same request id.  Their cost is real spend, so the stage's cost includes it.

Audits (``learning.audit``: a shadow answer from the heavy lane and a judge's call, in the
background) are spend of the same kind: their rows in the log's ``audits`` table are joined
to the stage by request id the same way, and their cost is added to the stage's.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hybrid_gateway.tools.bench.results import RequestResult

__all__ = ["LateFigures", "LateRow", "late_of", "read_audit_costs", "read_late_rows"]

_LATE_SUFFIX = ".late"


@dataclass(frozen=True, slots=True)
class LateRow:
    status: int | None
    cost_usd: float | None


@dataclass(frozen=True, slots=True)
class LateFigures:
    deliveries: int = 0  # late answers that arrived (2xx)
    failed: int = 0  # late answers that failed or were cancelled at shutdown
    cost_usd: float = 0.0  # what the late answers cost (already paid for by the operator)
    audits: int = 0  # audits (shadow answer + judge) of the stage's requests
    audit_cost_usd: float = 0.0  # what they cost


def read_late_rows(log: Path) -> dict[str, LateRow]:
    """Client request id -> its late row, from a SQLite request log (empty when none)."""
    if not log.exists():
        return {}
    with sqlite3.connect(f"file:{log}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT request_id, status, cost_usd FROM requests WHERE fallback = 'late'"
        ).fetchall()
    return {
        str(rid).removesuffix(_LATE_SUFFIX): LateRow(status, cost)
        for rid, status, cost in rows
        if str(rid).endswith(_LATE_SUFFIX)
    }


def read_audit_costs(log: Path) -> dict[str, float]:
    """Request id -> what its audit cost, from a SQLite request log (empty when none)."""
    if not log.exists():
        return {}
    with sqlite3.connect(f"file:{log}?mode=ro", uri=True) as db:
        known = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'audits'").fetchone()
        if known is None:
            return {}
        rows = db.execute("SELECT request_id, cost_usd FROM audits").fetchall()
    return {str(rid): float(cost or 0.0) for rid, cost in rows}


def late_of(
    results: Sequence[RequestResult],
    rows: Mapping[str, LateRow],
    audits: Mapping[str, float] | None = None,
) -> LateFigures:
    """The late rows and audits of ``results``' requests, counted and costed."""
    mine = [rows[r.request_id] for r in results if r.request_id and r.request_id in rows]
    done = sum(1 for row in mine if row.status is not None and 200 <= row.status < 300)
    audited = [(audits or {})[r.request_id] for r in results
               if r.request_id and r.request_id in (audits or {})]  # fmt: skip
    return LateFigures(
        deliveries=done,
        failed=len(mine) - done,
        cost_usd=sum(row.cost_usd or 0.0 for row in mine),
        audits=len(audited),
        audit_cost_usd=sum(audited),
    )
