"""The records' tables in PostgreSQL: ``requests``, ``feedback`` and the ``rated_requests`` view.

The same tables and view as in the SQLite log file, with PostgreSQL types.  Set up at first use
by whichever replica gets there first, under an advisory lock (``CREATE ... IF NOT EXISTS`` alone
races between replicas starting together).  A quick look at the catalogue comes first, and DDL
runs only when something is missing: an ``ALTER TABLE`` waits for an exclusive lock on
``requests``, and one taken while another replica's flusher is mid-insert ends in a deadlock.
So DDL runs on a fresh database, or once after an upgrade added columns (``COLUMNS`` only
grows; the view is then recreated to carry them).
"""

from __future__ import annotations

from hybrid_gateway.observability.log_rows import COLUMN_TYPES, COLUMNS
from hybrid_gateway.stores.postgres import Connection

__all__ = ["ensure_records_schema"]

_LOCK = "SELECT pg_advisory_xact_lock(hashtext('hybrid_gateway.records'))"
_COUNTS = """
SELECT table_name, count(*) FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name IN ('requests', 'feedback', 'rated_requests')
GROUP BY table_name
"""
_REQUESTS = (
    f"CREATE TABLE IF NOT EXISTS requests "
    f"({', '.join(f'{c} {t}' for c, t in COLUMN_TYPES.items())})"
)
_FEEDBACK = """CREATE TABLE IF NOT EXISTS feedback (
    request_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    rating TEXT NOT NULL CHECK (rating IN ('up', 'down')),
    reason TEXT,
    comment TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL
)"""
_FEEDBACK_COLUMNS = 7
_VIEW = """CREATE OR REPLACE VIEW rated_requests AS
    SELECT f.rating, f.reason, f.comment, f.updated_at AS rated_at, r.*
    FROM feedback AS f JOIN requests AS r USING (request_id)"""
_VIEW_EXTRA = 4  # rating, reason, comment, rated_at


def ensure_records_schema(conn: Connection) -> None:
    """Create what is missing of the tables and the view (nothing, once they exist)."""
    if _complete(_counts(conn)):
        return
    with conn.transaction():
        conn.execute(_LOCK)
        counts = _counts(conn)  # again: another replica may have done it meanwhile
        if _complete(counts):
            return
        conn.execute(_REQUESTS)
        conn.execute("CREATE INDEX IF NOT EXISTS requests_ts ON requests (ts)")
        have = {
            row[0]
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND table_name = 'requests'"
            )
        }
        for column in COLUMNS:
            if column not in have:
                conn.execute(f"ALTER TABLE requests ADD COLUMN {column} {COLUMN_TYPES[column]}")
        conn.execute(_FEEDBACK)
        conn.execute("CREATE INDEX IF NOT EXISTS feedback_updated_at ON feedback (updated_at)")
        conn.execute(_VIEW)


def _counts(conn: Connection) -> dict[str, int]:
    return {str(name): int(count) for name, count in conn.execute(_COUNTS)}


def _complete(counts: dict[str, int]) -> bool:
    requests = counts.get("requests", 0)
    return (
        requests >= len(COLUMNS)
        and counts.get("feedback", 0) >= _FEEDBACK_COLUMNS
        and counts.get("rated_requests", 0) >= requests + _VIEW_EXTRA
    )
