"""The router_models table on either records store, for the tests of the versions and their
students: the SQLite request log's file, or PostgreSQL (``postgres_url``) through the
gateway's pool."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hybrid_gateway.learning.model_store import ModelStore, PostgresModelStore, SqliteModelStore
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.stores.health import StoreHealth
from hybrid_gateway.stores.postgres import PostgresPool

# the table as it was before students were stored, with one version in it
_OLD_TABLE = """CREATE TABLE router_models (
    version INTEGER PRIMARY KEY, created {real} NOT NULL, namespace TEXT NOT NULL,
    metrics TEXT NOT NULL, model {blob} NOT NULL, live_since {real}
)"""
_OLD_ROW = (
    "INSERT INTO router_models (version, created, namespace, metrics, model, live_since) "
    "VALUES (1, 1.0, 'e5@1', '{{}}', {old}, 1.0)"
)


def open_model_store(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, *, old_table: bool = False
) -> Iterator[ModelStore]:
    """For a fixture: ``router_models`` in ``tmp_path``'s SQLite file (``backend`` "sqlite") or
    in the test's PostgreSQL database through the gateway's pool; ``old_table``: the table as
    it was before students were stored, with one version (bytes ``old``) in it."""
    if backend == "sqlite":
        path = tmp_path / "requests.sqlite3"
        if old_table:
            with sqlite3.connect(path) as db:
                db.execute(_OLD_TABLE.format(real="REAL", blob="BLOB"))
                db.execute(_OLD_ROW.format(old="X'6f6c64'"))  # b"old"
            db.close()
        opened: ModelStore = SqliteModelStore(path)
        yield opened
        opened.close()
        return
    url = request.getfixturevalue("postgres_url")
    pool = PostgresPool(url, size=2, timeout_ms=2000,
                        health=StoreHealth(ManualClock(), retry_s=1.0))  # fmt: skip
    if old_table:

        def old(conn: Any) -> None:
            conn.execute(_OLD_TABLE.format(real="DOUBLE PRECISION", blob="BYTEA"))
            conn.execute(_OLD_ROW.format(old="'old'::bytea"))

        pool.run("setup", old)
    yield PostgresModelStore(lambda work: pool.run("router_models", work))
    pool.close()
