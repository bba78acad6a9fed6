"""The ``stores`` config section: where shared state lives and what happens when it is gone.

``backend: memory`` (the default) keeps rate buckets, budgets, breaker state, the exact cache
and deferred results in this process, exactly as a single gateway always did.  ``backend:
redis`` puts them in one Redis so that N replicas behind a load balancer enforce one limit, not
N times the limit.  ``records: postgres`` puts the records (request log, feedback) and the
semantic-cache vectors in one PostgreSQL with pgvector, so every replica logs to one table and
a question cached through one replica is a hit through the others.  The ``*_on_outage`` keys
say, per function, what a replica does while Redis or PostgreSQL cannot be reached; each is
documented in docs/scale-out.md.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from hybrid_gateway.configbase import PositiveFloat, PositiveInt, Strict

__all__ = ["StoresConfig"]


class StoresConfig(Strict):
    backend: Literal["memory", "redis"] = "memory"
    redis_url: Annotated[str, Field(pattern=r"^(redis|rediss|unix)://")] = (
        "redis://127.0.0.1:6379/0"
    )
    # Every key this gateway writes starts with this, so several deployments (or tests) can
    # share one Redis without seeing each other's state.
    key_prefix: Annotated[str, Field(min_length=1, max_length=64)] = "hgw:"
    # Per-command socket timeout: a stalled Redis must not stall requests for long.
    timeout_ms: PositiveInt = 250
    # After a failed command the store is "down": requests stop trying Redis (they take the
    # outage path at once) and a background ping tries again every this many seconds.
    retry_s: PositiveFloat = 1.0
    # How often breaker counts and budget spend are exchanged with Redis (the background sync).
    sync_interval_ms: PositiveInt = 250
    # Exact-cache entries larger than this are not stored in Redis (its maxmemory and eviction
    # policy bound the total; this bounds one entry).
    max_entry_bytes: PositiveInt = 256 * 1024
    # open: admit while Redis is down (availability first); closed: refuse with 503.
    rate_limits_on_outage: Literal["open", "closed"] = "open"
    # bypass: the exact cache is skipped (a miss, nothing stored) while Redis is down.
    cache_on_outage: Literal["bypass"] = "bypass"
    # local: spend is debited in this replica's view and queued; the queue is sent (once per
    # request, by request id) when Redis returns.  Caps keep being checked on the local view.
    budgets_on_outage: Literal["local"] = "local"

    # Records (request log, feedback) and semantic-cache vectors: SQLite files next to this
    # process (the default) or one PostgreSQL with the pgvector extension shared by replicas.
    records: Literal["sqlite", "postgres"] = "sqlite"
    postgres_url: Annotated[str, Field(pattern=r"^postgres(ql)?://")] = (
        "postgresql://127.0.0.1:5432/hybrid_gateway"
    )
    # Connections this process opens to PostgreSQL (the log flusher, feedback, the semantic
    # cache's worker each take one at a time).
    postgres_pool_size: PositiveInt = 4
    # Connect and statement timeout: a stalled PostgreSQL must not stall requests for long.
    postgres_timeout_ms: PositiveInt = 2000
    # buffer: request-log rows stay in the local disk journal while PostgreSQL is down and are
    # inserted when it returns (nothing acknowledged is lost).
    records_on_outage: Literal["buffer"] = "buffer"
    # bypass: the semantic cache is skipped (a miss, nothing stored) while PostgreSQL is down.
    semantic_on_outage: Literal["bypass"] = "bypass"
