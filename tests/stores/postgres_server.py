"""A private PostgreSQL 16 + pgvector for tests, from the ``pgserver`` wheel.

One server per test session (``PostgresServer``, in a temp dir); every test gets a fresh
database with ``CREATE EXTENSION vector`` done (``fresh_database``), so tests never see each
other's rows.  The outage tests start a second server of their own and ``stop()`` / ``start()``
it mid-run: the URL (a Unix socket in the data dir) stays the same across restarts.

The machine's PostgreSQL 15 at 127.0.0.1:5432 has no pgvector and is not used.

pgserver listens on a Unix socket only (no TCP port).  As root it runs the server as a system
user ``pgserver`` (created with ``useradd`` on first use) and opens the data dir's parent
folders to others.  That is why the data dir is not under pytest's temp root: pytest resets
``/tmp/pytest-of-root`` to mode 0700 whenever any test session starts, which locks the server
out of its own data dir.  ``PostgresServer.temporary()`` uses a ``mkdtemp`` folder of its own
(short, too: a Unix socket path is at most 107 bytes) and ``remove()`` deletes it.

Importing pgserver warns when ``XDG_RUNTIME_DIR`` is unset (it then uses /tmp/runtime-<uid>),
which the suite's ``filterwarnings = error`` would turn into a failure, so the import is done
with that warning silenced.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

if TYPE_CHECKING:
    from pgserver.postgres_server import PostgresServer as _Server

__all__ = [
    "PostgresServer", "dead_postgres_url", "drop_database", "fresh_database", "temporary_server",
]  # fmt: skip


def _pgserver() -> ModuleType:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs' RuntimeDirWarning, at import
        import pgserver

    return pgserver


@dataclass
class PostgresServer:
    """``start()`` / ``stop()`` as often as a test needs; ``uri()`` stays the same."""

    pgdata: Path
    _server: _Server | None = field(default=None, repr=False)

    def start(self) -> None:
        if self._server is None:
            self._server = _pgserver().get_server(self.pgdata, cleanup_mode="stop")

    def stop(self) -> None:
        """Stop the server (``pg_ctl stop``: connections are cut); the data dir stays."""
        if self._server is not None:
            self._server.cleanup()
            self._server = None

    @classmethod
    def temporary(cls) -> PostgresServer:
        """A server (not started yet) in a new temp folder of its own."""
        return cls(Path(tempfile.mkdtemp(prefix="hgw-pg-")) / "data")

    def remove(self) -> None:
        """Stop, then delete the data dir and its temp folder."""
        self.stop()
        shutil.rmtree(self.pgdata.parent, ignore_errors=True)

    def uri(self, database: str = "postgres") -> str:
        if self._server is None:
            raise RuntimeError("the test PostgreSQL is not running")
        return str(self._server.get_uri(database))

    @property
    def running(self) -> bool:
        return self._server is not None


@contextmanager
def temporary_server() -> Iterator[PostgresServer]:
    """A running server in a temp folder of its own, removed on exit."""
    server = PostgresServer.temporary()
    server.start()
    try:
        yield server
    finally:
        server.remove()


def fresh_database(server: PostgresServer) -> str:
    """Create a uniquely named database with the ``vector`` extension; return its URL."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server.uri(), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = server.uri(name)
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return url


def drop_database(server: PostgresServer, url: str) -> None:
    """Drop a database ``fresh_database`` made, cutting any connection a test left open."""
    if not server.running:
        return
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(server.uri(), autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(str(name)))
        )


def dead_postgres_url(folder: Path) -> str:
    """A URL whose socket directory has no server: every connection attempt is refused."""
    folder.mkdir(parents=True, exist_ok=True)
    return f"postgresql://postgres:@/hybrid_gateway?host={folder}"
