"""Reading audit verdicts back from the records store (offline: reports, training).

A pending ``feedback`` audit takes its verdict from the rating (``store.LABELS_SQL``); a log
without a ``feedback`` table (the feedback API never opened) reads the stored verdicts only,
and one without an ``audits`` table has no labels.
"""

from __future__ import annotations

from dataclasses import dataclass

from hybrid_gateway.accounting.report import LogSource
from hybrid_gateway.learning.store import LABELS_SQL

__all__ = ["PAIR_KINDS", "Label", "read_labels"]

_TABLES = {
    "sqlite": "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN "
    "('audits', 'feedback')",
    "postgres": "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname IN "
    "('audits', 'feedback') AND pg_table_is_visible(oid)",
}
_NO_FEEDBACK = (
    "SELECT request_id, ts, tenant, kind, scope, similarity, lane_a, lane_b, verdict, prompt, "
    "cached_prompt "
    "FROM audits WHERE ts >= ? AND ts < ?"
)


# The audit kinds that judge a (question, cached question) pair: a served hit, and a near miss
# (what a lower threshold would have served).  Both are labelled pairs for the cache's own
# calibration; only served hits count in the false-hit rate of what the cache served.
PAIR_KINDS = frozenset({"cache", "near_miss"})


@dataclass(frozen=True, slots=True)
class Label:
    request_id: str
    ts: float
    tenant: str
    kind: str  # router | cache | near_miss
    scope: str | None
    similarity: float | None
    lane_a: str | None
    lane_b: str | None
    verdict: str | None  # None: no verdict (failed, or a feedback audit nobody rated)
    prompt: str | None  # as server.request_log.prompts stored it
    # cache and near-miss audits: the entry's question (served, or refused), the same way
    cached_prompt: str | None = None


def read_labels(source: LogSource, since: float, until: float) -> list[Label]:
    tables = {str(row[0]) for row in source.query(_TABLES[source.dialect], ())}
    if "audits" not in tables:
        return []
    sql = LABELS_SQL if "feedback" in tables else _NO_FEEDBACK
    rows = source.query(sql + " ORDER BY 2, 1", (since, until))  # ts, request_id
    return [
        Label(str(r[0]), float(r[1]), str(r[2]), str(r[3]), r[4],
              None if r[5] is None else float(r[5]), r[6], r[7], r[8], r[9], r[10])
        for r in rows
    ]  # fmt: skip
