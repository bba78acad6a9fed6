"""The auditor the config asks for (``learning.audit``), wired to the runtime's parts."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from hybrid_gateway.accounting.prices import Price
from hybrid_gateway.cache.semantic.stage import SemanticStage, scope_of
from hybrid_gateway.config import GatewayConfig, resolve_path
from hybrid_gateway.config_checks import AUDIT_NEEDS_LOG, THRESHOLD_NEEDS_SEMANTIC
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.learning.auditor import Auditor, AuditParts, VerdictListener
from hybrid_gateway.learning.bound import FalseHitTracker
from hybrid_gateway.learning.judges import build_judge
from hybrid_gateway.learning.lanecall import LaneCaller
from hybrid_gateway.learning.load import lane_load_probe
from hybrid_gateway.learning.metrics import AuditMetrics
from hybrid_gateway.learning.spend import SpendCaps
from hybrid_gateway.learning.store import SqliteVerdictStore, SqlVerdictStore
from hybrid_gateway.learning.threshold import ThresholdFollower, ThresholdPolicy
from hybrid_gateway.observability.journaled_log import RequestLog
from hybrid_gateway.resilience.clock import Clock, MonotonicClock
from hybrid_gateway.resilience.degradation import Degradation
from hybrid_gateway.resilience.dispatch import Dispatcher

__all__ = ["build_auditor", "open_verdict_store"]


def _follower(
    config: GatewayConfig,
    config_path: str | Path | None,
    semantic: SemanticStage | None,
    clock: Clock | None,
    metrics: AuditMetrics,
) -> tuple[ThresholdFollower, ...]:
    """``learning.cache_threshold``: the semantic cache's threshold follows the cache audits."""
    settings = config.learning.cache_threshold
    if not settings.enabled:
        return ()
    if semantic is None:
        raise ConfigError(str(config_path or "<config>"), *THRESHOLD_NEEDS_SEMANTIC)
    stage = semantic

    def apply(threshold: float) -> None:
        stage.replace_decision(replace(stage.cache.rule, threshold=threshold), None)

    audit = config.learning.audit
    policy = ThresholdPolicy(settings, stage.threshold, clock or MonotonicClock(),
                             explores=audit.near_miss.rate > 0)  # fmt: skip
    rates = {"cache": audit.cache.rate, "near_miss": audit.near_miss.rate}
    return (ThresholdFollower(policy, apply, metrics.threshold, rates),)


def open_verdict_store(
    config: GatewayConfig, config_path: str | Path | None, request_log: RequestLog
) -> SqlVerdictStore:
    """The ``audits`` table beside the request log: its SQLite file, or its PostgreSQL pool."""
    pool = getattr(request_log, "pool", None)
    if config.stores.records == "postgres" and pool is not None:
        from hybrid_gateway.learning.store_pg import PostgresVerdictStore

        return PostgresVerdictStore(pool)
    return SqliteVerdictStore(resolve_path(config_path, config.server.request_log.path))


def build_auditor(
    config: GatewayConfig,
    config_path: str | Path | None,
    *,
    dispatcher: Dispatcher,
    degradation: Degradation,
    prices: Mapping[str, Price],
    request_log: RequestLog | None,
    metrics: AuditMetrics,
    semantic: SemanticStage | None = None,
    listeners: tuple[VerdictListener, ...] = (),
    wall: Callable[[], float] = time.time,
    clock: Clock | None = None,
) -> Auditor | None:
    audit = config.learning.audit
    if not audit.enabled:
        return None
    if request_log is None:
        raise ConfigError(str(config_path or "<config>"), *AUDIT_NEEDS_LOG)
    lanes = {
        name: (lane.channel,) + ((lane.backup,) if lane.backup is not None else ())
        for name, lane in config.lanes.items()
    }
    caller = LaneCaller(dispatcher, lanes, prices, wall)
    slots = {name: lane.queue.max_concurrency for name, lane in config.lanes.items() if lane.queue}
    busy = lane_load_probe(
        {name: lane.channel for name, lane in config.lanes.items()}, dispatcher,
        gates=degradation.gates, queue_slots=slots, shedder=degradation.shedder,
    )  # fmt: skip
    caps = {kind: audit.stream(kind).daily_usd_per_tenant
            for kind in ("router", "cache", "near_miss")}  # fmt: skip
    parts = AuditParts(
        config=audit, caller=caller, judge=build_judge(audit.judge, caller.ask),
        store=open_verdict_store(config, config_path, request_log),
        caps=SpendCaps(caps, wall), wall=wall, rng=random.Random(), busy=busy,
        prompts=config.server.request_log.prompts, metrics=metrics,
        listeners=(FalseHitTracker(metrics.bound), *_follower(config, config_path, semantic,
                                                              clock, metrics), *listeners),
    )  # fmt: skip
    if semantic is not None:  # the scope a hit came from, as the cache reads it now
        stage = semantic
        parts = replace(parts, scope=lambda tenant: scope_of(tenant, stage.shared_scopes),
                        cached_entry=lambda entry: _entry_of(stage, entry),
                        cache_threshold=lambda: stage.threshold)  # fmt: skip
    return Auditor(parts)


async def _entry_of(stage: SemanticStage, entry_id: int) -> tuple[str, bytes] | None:
    entry = await stage.cache.get(entry_id)
    return None if entry is None else (entry.question, entry.body)
