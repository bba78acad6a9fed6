"""Build the request log the config asks for: SQLite (the default) or the shared PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from hybrid_gateway.config import GatewayConfig, resolve_path
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.observability.journaled_log import RequestLog
from hybrid_gateway.observability.request_log import SqliteRequestLog
from hybrid_gateway.stores.health import StoreHealth

__all__ = ["build_request_log"]


def build_request_log(
    config: GatewayConfig,
    config_path: str | Path | None,
    *,
    health: StoreHealth | None = None,
) -> RequestLog | None:
    """``server.request_log`` in ``stores.records``; None when the log is disabled.

    With ``records: postgres`` the log's ``path`` names the local journal files only, and
    ``health`` is PostgreSQL's (one per process, shared with the semantic cache's vectors).
    """
    cfg = config.server.request_log
    if not cfg.enabled:
        return None
    path = resolve_path(config_path, cfg.path)
    interval_s = cfg.flush_interval_ms / 1000
    if config.stores.records == "sqlite":
        return SqliteRequestLog(
            path, flush_interval_s=interval_s, retention_days=cfg.retention_days,
            prompts=cfg.prompts,
        )  # fmt: skip
    try:
        from hybrid_gateway.observability.request_log_pg import PostgresRequestLog
        from hybrid_gateway.stores.postgres import PostgresPool
    except ImportError as exc:
        raise ConfigError(
            str(config_path or "<config>"), "stores.records",
            f"sqlite, or install the postgres extra for postgres ({exc})",
        ) from exc  # fmt: skip
    assert health is not None, "records: postgres is built with PostgreSQL's health"
    stores = config.stores
    pool = PostgresPool(
        stores.postgres_url, size=stores.postgres_pool_size,
        timeout_ms=stores.postgres_timeout_ms, health=health,
    )  # fmt: skip
    return PostgresRequestLog(
        path, pool, flush_interval_s=interval_s, retention_days=cfg.retention_days,
        prompts=cfg.prompts,
    )  # fmt: skip
