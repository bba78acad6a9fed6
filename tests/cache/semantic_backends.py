"""Build empty semantic caches of either backend for tests that run against both.

``memory``: the in-process ``SemanticCache``.  ``postgres``: ``PgSemanticCache`` on a fresh
database of the session's pgserver (the ``postgres_url`` fixture, requested only for this
kind, so the in-process runs never start PostgreSQL).  Each new cache closes the previous one
and starts from an empty table (hypothesis examples share one database).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Protocol

import psycopg
import pytest

from hybrid_gateway.cache.semantic.backend import SemanticBackend
from hybrid_gateway.cache.semantic.cache import CacheBounds, SemanticCache
from hybrid_gateway.cache.semantic.decision import DecisionRule
from hybrid_gateway.cache.semantic.store_pg import TABLE, PgSemanticCache
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.stores.health import StoreHealth

__all__ = ["EPOCH", "Factory", "backend_factory", "pg_cache"]

EPOCH = 1_000_000.0


class Factory(Protocol):
    async def __call__(
        self,
        clock: ManualClock | None = None,
        *,
        max_entries: int = 1000,
        max_bytes: int = 10_000_000,
        ttl_s: float = 3600,
    ) -> SemanticBackend: ...


def pg_cache(
    url: str,
    rule: DecisionRule,
    clock: ManualClock,
    *,
    bounds: CacheBounds | None = None,
    health: StoreHealth | None = None,
    timeout_s: float = 2.0,
) -> PgSemanticCache:
    return PgSemanticCache(
        url, bounds=bounds or CacheBounds(3600, 1000, 10_000_000), rule=rule, clock=clock,
        health=health or StoreHealth(clock, retry_s=1.0), timeout_s=timeout_s, epoch=EPOCH,
    )  # fmt: skip


@contextlib.asynccontextmanager
async def backend_factory(
    request: pytest.FixtureRequest, rule: DecisionRule
) -> AsyncIterator[Factory]:
    kind = request.param
    url = str(request.getfixturevalue("postgres_url")) if kind == "postgres" else ""
    made: list[SemanticBackend] = []

    async def make(
        clock: ManualClock | None = None,
        *,
        max_entries: int = 1000,
        max_bytes: int = 10_000_000,
        ttl_s: float = 3600,
    ) -> SemanticBackend:
        if made:
            await made.pop().aclose()
        bounds = CacheBounds(ttl_s=ttl_s, max_entries=max_entries, max_bytes=max_bytes)
        cache: SemanticBackend
        if kind == "postgres":
            with psycopg.connect(url, autocommit=True) as db:
                db.execute(f"DROP TABLE IF EXISTS {TABLE}")
            cache = pg_cache(url, rule, clock or ManualClock(), bounds=bounds)
        else:
            cache = SemanticCache(bounds=bounds, rule=rule, clock=clock or ManualClock(),
                                  epoch=EPOCH)  # fmt: skip
        made.append(cache)
        return cache

    try:
        yield make
    finally:
        for cache in made:
            await cache.aclose()
