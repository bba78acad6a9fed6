"""Open the request log a gateway config names, for the reports: SQLite or PostgreSQL.

``stores.records: sqlite`` (the default): the file at ``server.request_log.path``, read-only.
``stores.records: postgres``: the shared ``requests`` table at ``stores.postgres_url`` (every
replica's rows), on one connection for the report's few queries.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybrid_gateway.accounting.report import LogSource, ReportError, sqlite_source
from hybrid_gateway.config import GatewayConfig, resolve_path

if TYPE_CHECKING:
    import psycopg

__all__ = ["config_source", "connect_records"]


def connect_records(config: GatewayConfig, config_path: str | Path) -> psycopg.Connection[Any]:
    """A connection to the shared records (``stores.postgres_url``); ``ReportError`` when
    psycopg is missing or PostgreSQL cannot be reached (the message names the field, never the
    URL, which may hold a password)."""
    try:
        import psycopg
    except ImportError as exc:
        expected = f"stores.records: postgres needs psycopg ({exc})"
        raise ReportError(f"{config_path}: {expected}") from None
    stores = config.stores
    try:
        return psycopg.connect(
            stores.postgres_url, connect_timeout=max(1, round(stores.postgres_timeout_ms / 1000))
        )
    except psycopg.Error as exc:
        raise ReportError(f"{config_path}: cannot reach stores.postgres_url: {exc}") from None


@contextmanager
def config_source(config: GatewayConfig, config_path: str | Path) -> Iterator[LogSource]:
    if config.stores.records == "sqlite":
        with sqlite_source(resolve_path(config_path, config.server.request_log.path)) as source:
            yield source
        return
    conn = connect_records(config, config_path)  # psycopg is importable from here on
    import psycopg

    from hybrid_gateway.stores.postgres import pyformat

    try:
        yield LogSource(
            lambda sql, params: list(conn.execute(pyformat(sql), params).fetchall()),
            dialect="postgres",
            name="the shared requests table (stores.postgres_url)",
        )
    except psycopg.Error as exc:  # a query failed
        raise ReportError(f"cannot read the shared requests table: {exc}") from None
    finally:
        conn.close()
