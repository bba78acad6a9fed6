"""Every SQL statement the misroute review runs, against the request log's tables.

The review reads two tables the gateway writes: ``requests`` (one row per request,
``observability/request_log.py``) and ``feedback`` (``feedback/store.py``).  The statements are
plain SQL (no SQLite functions, no JSON) and the parameter marker is a constructor argument, so
the same reader runs on the SQLite file (``?``) and on a DB-API connection to PostgreSQL
(``%s``) holding the same tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

_REQUEST_COLUMNS: tuple[str, ...] = (
    "request_id", "ts", "tenant", "model", "lane", "channel", "rule", "score", "cache",
    "status", "latency_ms", "prompt_tokens", "completion_tokens", "cost_usd", "prompt",
    "category",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class LoggedRequest:
    """One answered request from the log, with what the review needs of it."""

    request_id: str
    ts: float
    tenant: str
    model: str
    lane: str | None
    channel: str | None
    rule: str | None
    score: float | None
    cache: str
    status: int
    latency_ms: float
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    prompt: str | None
    # The category the request declared (``metadata``, the key the routing gates read).
    category: str | None = None


@dataclass(frozen=True, slots=True)
class Rating:
    """A thumbs-down on a request (``feedback`` table)."""

    request_id: str
    reason: str | None
    comment: str | None


class Connection(Protocol):
    """What the reader needs of a DB-API connection (sqlite3, psycopg)."""

    def cursor(self) -> Any: ...

    def rollback(self) -> None: ...


class LogReader:
    """Reads the window's requests and thumbs-down; ``marker`` is the driver's ``paramstyle``
    placeholder (``?`` for sqlite3, ``%s`` for psycopg)."""

    def __init__(self, connection: Connection, *, marker: str = "?") -> None:
        self._connection = connection
        self._marker = marker

    def requests(self, since: float, until: float) -> list[LoggedRequest]:
        """Answered requests (status 200) in ``[since, until)``, oldest first."""
        columns = _REQUEST_COLUMNS
        if not self._has("SELECT category FROM requests WHERE 1 = 0", "category"):
            columns = tuple("NULL" if c == "category" else c for c in columns)
        sql = (
            f"SELECT {', '.join(columns)} FROM requests "
            f"WHERE ts >= {self._marker} AND ts < {self._marker} AND status = 200 "
            "ORDER BY ts, request_id"
        )
        return [_request(row) for row in self._rows(sql, (since, until))]

    def thumbs_down(self, since: float, until: float) -> list[Rating]:
        """Thumbs-down ratings on requests made in ``[since, until)``."""
        sql = (
            "SELECT f.request_id, f.reason, f.comment FROM feedback f "
            "JOIN requests r ON r.request_id = f.request_id "
            f"WHERE f.rating = 'down' AND r.ts >= {self._marker} AND r.ts < {self._marker} "
            "ORDER BY r.ts, f.request_id"
        )
        if not self._has("SELECT request_id FROM feedback WHERE 1 = 0", "feedback"):
            return []
        return [Rating(str(rid), reason, comment) for rid, reason, comment in self._rows(
            sql, (since, until)
        )]  # fmt: skip

    def _has(self, probe: str, name: str) -> bool:
        """False when ``probe`` fails for want of ``name``: a log written without the feedback
        API has no feedback table; one no gateway of this version has opened lacks newer
        columns (the gateway adds them at start-up, the review only reads)."""
        try:
            self._rows(probe, ())
        except Exception as exc:  # sqlite3.OperationalError / psycopg.errors.Undefined*
            if name not in str(exc):
                raise
            self._connection.rollback()  # PostgreSQL refuses every statement after an error
            return False
        return True

    def _rows(self, sql: str, params: Sequence[Any]) -> list[Any]:
        cursor = self._connection.cursor()
        try:
            cursor.execute(sql, params)
            return list(cursor.fetchall())
        finally:
            cursor.close()


def _request(row: Sequence[Any]) -> LoggedRequest:
    (rid, ts, tenant, model, lane, channel, rule, score, cache, status, latency_ms,
     prompt_tokens, completion_tokens, cost, prompt, category) = row  # fmt: skip
    return LoggedRequest(
        request_id=str(rid), ts=float(ts), tenant=str(tenant), model=str(model or ""),
        lane=lane, channel=channel, rule=rule,
        score=float(score) if score is not None else None, cache=str(cache or "miss"),
        status=int(status), latency_ms=float(latency_ms or 0.0),
        prompt_tokens=int(prompt_tokens or 0),
        completion_tokens=int(completion_tokens or 0), cost_usd=float(cost or 0.0),
        prompt=prompt if isinstance(prompt, str) else None,
        category=category if isinstance(category, str) else None,
    )  # fmt: skip
