"""The router updater the config asks for (``learning.router_update``), wired to the runtime."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hybrid_gateway.accounting.report import LogSource, sqlite_source
from hybrid_gateway.config import GatewayConfig, resolve_path
from hybrid_gateway.config_checks import (
    UPDATE_NEEDS_CLASSIFIER,
    UPDATE_NEEDS_LOG,
    UPDATE_NEEDS_PROMPTS,
)
from hybrid_gateway.embedding.factory import SharedEmbedder
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.learning.labels import Label, read_labels
from hybrid_gateway.learning.metrics import RouterUpdateMetrics
from hybrid_gateway.learning.model_store import ModelStore, PostgresModelStore, SqliteModelStore
from hybrid_gateway.learning.router_student import StudentParts
from hybrid_gateway.learning.router_update import RouterUpdater, UpdateParts
from hybrid_gateway.observability.journaled_log import RequestLog
from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.routing.calibrate_cli import light_cost_of
from hybrid_gateway.routing.router import GatewayRouter, LiveModel

__all__ = ["build_router_update", "live_model_slot", "open_model_store"]


def live_model_slot(config: GatewayConfig) -> LiveModel | None:
    """The reference the router reads a versioned model from (None: the update is off)."""
    return LiveModel() if config.learning.router_update.enabled else None


def open_model_store(
    config: GatewayConfig, config_path: str | Path | None, request_log: RequestLog | None
) -> ModelStore:
    """``router_models`` beside the request log: its SQLite file, or its PostgreSQL pool."""
    pool = getattr(request_log, "pool", None)
    if config.stores.records == "postgres" and pool is not None:
        return PostgresModelStore(lambda work: pool.run("router_models", work))
    return SqliteModelStore(resolve_path(config_path, config.server.request_log.path))


def _labels(
    config: GatewayConfig, config_path: str | Path | None, request_log: RequestLog
) -> Callable[[float, float], list[Label]]:
    pool = getattr(request_log, "pool", None)
    if config.stores.records == "postgres" and pool is not None:
        from hybrid_gateway.stores.postgres import pyformat

        def query(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            return list(pool.run("audits", lambda c: c.execute(pyformat(sql), params).fetchall()))

        source = LogSource(query, dialect="postgres")
        return lambda since, until: read_labels(source, since, until)
    path = resolve_path(config_path, config.server.request_log.path)

    def from_file(since: float, until: float) -> list[Label]:
        request_log.flush()  # the journaled rows in, so the audits' requests are there too
        with sqlite_source(path) as opened:
            return read_labels(opened, since, until)

    return from_file


def build_router_update(
    config: GatewayConfig,
    config_path: str | Path | None,
    *,
    request_log: RequestLog | None,
    embedder: SharedEmbedder | None,
    router: GatewayRouter,
    live: LiveModel | None,
    clock: Clock,
    metrics: RouterUpdateMetrics,
    wall: Callable[[], float] = time.time,
    static: SharedEmbedder | None = None,
) -> RouterUpdater | None:
    """``router``: the gateway's, built with ``live``; its classifier model (version 0) and
    cascade student, read and checked at its build, are the updater's too."""
    settings = config.learning.router_update
    if not settings.enabled or live is None:
        return None
    source = str(config_path or "<config>")
    classifier = config.routing.classifier
    learned = router.learned
    # config_checks.py refuses these at parse time; a config built otherwise meets them here
    if classifier is None or embedder is None or learned is None or learned.model is None:
        raise ConfigError(source, *UPDATE_NEEDS_CLASSIFIER)
    if request_log is None:
        raise ConfigError(source, *UPDATE_NEEDS_LOG)
    if settings.train and config.server.request_log.prompts not in ("full", "redacted"):
        raise ConfigError(source, *UPDATE_NEEDS_PROMPTS)
    students = None
    if learned.cascade is not None and static is not None:  # the classifier's cascade is on
        students = StudentParts(learned.cascade.student, static.namespace, static.embed_many)
    parts = UpdateParts(
        settings=settings, live=live, file_model=learned.model, namespace=embedder.namespace,
        store=open_model_store(config, config_path, request_log),
        labels=_labels(config, config_path, request_log), embed=embedder.embed_many,
        threshold=classifier.threshold, light_cost=light_cost_of(config), clock=clock,
        wall=wall, metrics=metrics, students=students,
    )  # fmt: skip
    metrics.version.set(0)  # the file's model until a version is loaded
    return RouterUpdater(parts)
