"""Router model versions in the records store: a ``router_models`` table beside ``audits``.

One row per accepted model: ``version`` (1, 2, ...), ``created`` (epoch seconds), the embedder
``namespace`` it was trained under (``model_id@version``), its replay ``metrics`` (JSON), the
model file's bytes, its cascade ``student``'s (``routing/cascade.py``; NULL: none), and
``live_since``: the live version is the one made live last (the largest ``live_since``).  An
accepted model is live from its creation; ``router rollback`` makes an earlier one live again
by stamping its ``live_since`` (its student comes back with it), so the table is also the
history of what was live.

The same SQL runs on SQLite (the request log's file) and PostgreSQL (``stores.records:
postgres``, through ``run``, where the table is created under an advisory lock); the calls are
blocking, for worker threads and the CLI.  A table made before students were stored gains the
``student`` column when first opened (its rows: no student).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

__all__ = [
    "ModelStore", "ModelVersion", "PostgresModelStore", "SqliteModelStore", "ensure_models_schema",
]  # fmt: skip

T = TypeVar("T")

_SQLITE = """CREATE TABLE IF NOT EXISTS router_models (
    version INTEGER PRIMARY KEY, created REAL NOT NULL, namespace TEXT NOT NULL,
    metrics TEXT NOT NULL, model BLOB NOT NULL, live_since REAL, student BLOB
)"""
_SQLITE_STUDENT = "ALTER TABLE router_models ADD COLUMN student BLOB"
_PG = """CREATE TABLE IF NOT EXISTS router_models (
    version INTEGER PRIMARY KEY, created DOUBLE PRECISION NOT NULL, namespace TEXT NOT NULL,
    metrics TEXT NOT NULL, model BYTEA NOT NULL, live_since DOUBLE PRECISION, student BYTEA
)"""
_PG_STUDENT = "ALTER TABLE router_models ADD COLUMN IF NOT EXISTS student BYTEA"
_LOCK = "SELECT pg_advisory_xact_lock(hashtext('hybrid_gateway.router_models'))"
# the table exists with its latest column
_EXISTS = (
    "SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass('router_models') "
    "AND attname = 'student' AND NOT attisdropped"
)

_ADD = (
    "INSERT INTO router_models (version, created, namespace, metrics, model, live_since, "
    "student) SELECT coalesce(max(version), 0) + 1, ?, ?, ?, ?, ?, ? FROM router_models "
    "RETURNING version"
)
_LIVE = (
    "SELECT version, namespace FROM router_models WHERE live_since IS NOT NULL "
    "ORDER BY live_since DESC, version DESC LIMIT 1"
)
_LIST = (
    "SELECT version, created, namespace, metrics, live_since, student IS NOT NULL "
    "FROM router_models ORDER BY version"
)
_GET = "SELECT model FROM router_models WHERE version = ?"
_STUDENT = "SELECT student FROM router_models WHERE version = ?"
_MAKE_LIVE = "UPDATE router_models SET live_since = ? WHERE version = ?"


@dataclass(frozen=True, slots=True)
class ModelVersion:
    version: int
    created: float
    namespace: str  # the embedder the model was trained under
    metrics: dict[str, Any]  # the replay's figures, where it came from
    live_since: float | None
    has_student: bool = False  # a cascade student stored with it


class ModelStore(Protocol):
    def add(
        self, created: float, namespace: str, metrics: dict[str, Any], model: bytes,
        student: bytes | None = None,
    ) -> int:  # fmt: skip
        """Store a model (and its cascade student), live from ``created``; its new version."""
        ...

    def live(self) -> tuple[int, str] | None:
        """(version, namespace) of the live model; None: none stored."""
        ...

    def model(self, version: int) -> bytes | None: ...

    def student(self, version: int) -> bytes | None:
        """The student stored with ``version``; None: none (or no such version)."""
        ...

    def versions(self) -> list[ModelVersion]: ...

    def make_live(self, version: int, at: float) -> bool:
        """Make ``version`` live from ``at``; False when there is no such version."""
        ...

    def close(self) -> None: ...


class _SqlModels:
    """The queries, over ``run(lambda execute: ...)`` where ``execute(sql, params)`` returns
    the rows (a list) of one statement."""

    def __init__(self, run: Callable[[Callable[[_Execute], Any]], Any]) -> None:
        self._run = run

    def add(
        self, created: float, namespace: str, metrics: dict[str, Any], model: bytes,
        student: bytes | None = None,
    ) -> int:  # fmt: skip
        params = (created, namespace, json.dumps(metrics, sort_keys=True), model, created, student)
        rows = self._run(lambda execute: execute(_ADD, params))
        return int(rows[0][0])

    def live(self) -> tuple[int, str] | None:
        rows = self._run(lambda execute: execute(_LIVE, ()))
        return (int(rows[0][0]), str(rows[0][1])) if rows else None

    def model(self, version: int) -> bytes | None:
        rows = self._run(lambda execute: execute(_GET, (version,)))
        return bytes(rows[0][0]) if rows else None

    def student(self, version: int) -> bytes | None:
        rows = self._run(lambda execute: execute(_STUDENT, (version,)))
        return bytes(rows[0][0]) if rows and rows[0][0] is not None else None

    def versions(self) -> list[ModelVersion]:
        rows = self._run(lambda execute: execute(_LIST, ()))
        return [
            ModelVersion(int(r[0]), float(r[1]), str(r[2]), json.loads(r[3]),
                         None if r[4] is None else float(r[4]), bool(r[5]))
            for r in rows
        ]  # fmt: skip

    def make_live(self, version: int, at: float) -> bool:
        def update(execute: _Execute) -> bool:
            if not execute(_GET, (version,)):
                return False
            execute(_MAKE_LIVE, (at, version))
            return True

        return bool(self._run(update))


_Execute = Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]


class SqliteModelStore(_SqlModels):
    """The table in the request log's SQLite file (created if missing)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()  # one connection, used from worker threads in turn
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=5)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("BEGIN IMMEDIATE")  # one process adds the column (see _PG_STUDENT)
        try:
            self._db.execute(_SQLITE)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(router_models)")}
            if "student" not in columns:  # a table from before students were stored
                self._db.execute(_SQLITE_STUDENT)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        super().__init__(self._locked)

    def _locked(self, work: Callable[[_Execute], T]) -> T:
        def execute(sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
            return list(self._db.execute(sql, params).fetchall())

        with self._lock:
            return work(execute)

    def close(self) -> None:
        with self._lock:
            self._db.close()


def ensure_models_schema(conn: Any) -> None:
    """The table in PostgreSQL, created (or given its ``student`` column) once under an advisory
    lock (replicas start together)."""
    row = conn.execute(_EXISTS).fetchone()
    if row is not None and row[0]:
        return
    with conn.transaction():
        conn.execute(_LOCK)
        conn.execute(_PG)
        conn.execute(_PG_STUDENT)


class PostgresModelStore(_SqlModels):
    """The table in the shared PostgreSQL.  ``run(work)`` calls ``work(connection)``: the
    gateway's pool (``lambda w: pool.run("router_models", w)``) or one CLI connection."""

    def __init__(self, run: Callable[[Callable[[Any], Any]], Any]) -> None:
        from hybrid_gateway.stores.postgres import pyformat

        ready = [False]

        def on_connection(work: Callable[[_Execute], T]) -> T:
            def with_conn(conn: Any) -> T:
                if not ready[0]:
                    ensure_models_schema(conn)
                    ready[0] = True

                def execute(sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
                    cursor = conn.execute(pyformat(sql), params)
                    return list(cursor.fetchall()) if cursor.description is not None else []

                with conn.transaction():
                    return work(execute)

            return run(with_conn)  # type: ignore[no-any-return]

        super().__init__(on_connection)

    def close(self) -> None:
        """The pool (or the CLI's connection) belongs to whoever opened it."""
