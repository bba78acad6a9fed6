"""The seam under the semantic stage: where entries live and how the nearest one is found.

Two implementations, chosen by ``stores.records``:

    SemanticCache      (cache.py)     in-process index + LRU, written through to SQLite
    PgSemanticCache    (store_pg.py)  one PostgreSQL + pgvector table shared by every replica;
                                      each lookup is one nearest-neighbour query

Both enforce the namespace (scope, embedder ``model@version``) and the bucket inside the
search itself, apply the TTL, and offer the admin operations by entry id.
"""

from __future__ import annotations

from typing import Protocol

from hybrid_gateway.cache.semantic.cache import Namespace, SemanticLookup
from hybrid_gateway.cache.semantic.decision import DecisionRule
from hybrid_gateway.cache.semantic.store import StoredEntry
from hybrid_gateway.embedding.base import Vector
from hybrid_gateway.stores.health import StoreHealth
from hybrid_gateway.types import Usage

__all__ = ["SemanticBackend"]


class SemanticBackend(Protocol):
    rule: DecisionRule

    @property
    def health(self) -> StoreHealth | None:
        """The shared store's health (None: entries live in this process)."""
        ...

    async def lookup(
        self, namespace: Namespace, bucket: str, question: str, vector: Vector
    ) -> SemanticLookup: ...

    async def put(
        self, namespace: Namespace, bucket: str, question: str, vector: Vector, body: bytes,
        usage: Usage,
    ) -> int | None: ...  # fmt: skip

    async def get(self, entry_id: int) -> StoredEntry | None: ...

    async def invalidate(self, entry_id: int) -> bool: ...

    async def invalidate_scope(self, scope: str) -> int: ...

    async def correct(self, entry_id: int, body: bytes) -> bool: ...

    async def find(
        self, namespace: Namespace, bucket: str, vector: Vector, k: int = 5
    ) -> list[tuple[StoredEntry, float]]: ...

    async def stats(self) -> dict[str, object]:
        """For the admin API: ``backend``, live ``entries``, ``bytes``, and store health."""
        ...

    async def aclose(self) -> None: ...
