"""Audit verdicts, stored with their request: an ``audits`` table next to ``requests``.

The request log's SQLite file (WAL), or the shared PostgreSQL with ``stores.records: postgres``
(``store_pg.py``, the same table and SQL), like the feedback store.  A row holds what was
decided and what the judge said, never an answer; ``prompt`` is the request log's own
``prompt`` value for the request (``server.request_log.prompts``: nothing by default), and
``cached_prompt`` the same of the cached question a cache hit was served for.

With the ``feedback`` judge a row is stored pending (``verdict`` NULL) and ``LABELS_SQL``
reads the verdict from the rating: thumbs-down -> ``a_worse``, thumbs-up -> ``equivalent``.
"""

from __future__ import annotations

import asyncio
from dataclasses import astuple, dataclass
from pathlib import Path

from hybrid_gateway.feedback.store import Database, SqliteDatabase

__all__ = ["AUDIT_COLUMNS", "LABELS_SQL", "AuditRow", "SqlVerdictStore", "SqliteVerdictStore"]


@dataclass(frozen=True, slots=True)
class AuditRow:
    request_id: str
    ts: float  # wall clock of the audit
    tenant: str
    kind: str  # router | cache
    judge: str  # llm | marks | feedback
    rubric: str | None  # the llm judge's rubric version
    verdict: str | None  # equivalent | a_worse | b_worse; None: pending or failed
    error: str | None  # why there is no verdict (shadow_failed, judge_failed, judge_refused)
    lane_a: str | None  # the lane that answered the client (None: the cache)
    lane_b: str | None  # the lane of the reference answer
    similarity: float | None  # cache audits: the hit's similarity
    scope: str | None  # cache audits: the cache scope (tenant:NAME or scope:NAME)
    cost_usd: float  # shadow answer + judge
    prompt: str | None  # as server.request_log.prompts allows
    # cache audits: the question the served entry was stored for, under the same setting
    cached_prompt: str | None = None


AUDIT_COLUMNS = tuple(AuditRow.__dataclass_fields__)

SCHEMA_SQLITE = """
CREATE TABLE IF NOT EXISTS audits (
    request_id TEXT PRIMARY KEY, ts REAL NOT NULL, tenant TEXT NOT NULL, kind TEXT NOT NULL,
    judge TEXT NOT NULL, rubric TEXT,
    verdict TEXT CHECK (verdict IN ('equivalent', 'a_worse', 'b_worse')),
    error TEXT, lane_a TEXT, lane_b TEXT, similarity REAL, scope TEXT,
    cost_usd REAL NOT NULL, prompt TEXT, cached_prompt TEXT
);
CREATE INDEX IF NOT EXISTS audits_ts ON audits (ts);
"""

_INSERT = (
    f"INSERT INTO audits ({', '.join(AUDIT_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in AUDIT_COLUMNS)}) ON CONFLICT (request_id) DO NOTHING"
)
_GET = f"SELECT {', '.join(AUDIT_COLUMNS)} FROM audits WHERE request_id = ?"

# Every audit with its verdict, a pending feedback audit resolved by its rating.
LABELS_SQL = """
SELECT a.request_id, a.ts, a.tenant, a.kind, a.scope, a.similarity, a.lane_a, a.lane_b,
       coalesce(a.verdict, CASE f.rating WHEN 'down' THEN 'a_worse'
                                         WHEN 'up' THEN 'equivalent' END) AS verdict,
       a.prompt, a.cached_prompt
FROM audits AS a LEFT JOIN feedback AS f ON f.request_id = a.request_id
WHERE a.ts >= ? AND a.ts < ?
"""


class SqlVerdictStore:
    """Writes and reads audit rows over a ``Database`` (SQLite or PostgreSQL), off the loop."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def save(self, row: AuditRow) -> None:
        await asyncio.to_thread(self._db.execute, _INSERT, astuple(row))

    async def get(self, request_id: str) -> AuditRow | None:
        found = await asyncio.to_thread(self._db.one, _GET, (request_id,))
        return None if found is None else AuditRow(*found)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._db.close)


class SqliteVerdictStore(SqlVerdictStore):
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        super().__init__(SqliteDatabase(path, SCHEMA_SQLITE))
