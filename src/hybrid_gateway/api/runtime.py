"""Build the gateway's runtime objects from the config tree, and close them again.

Everything with a lifetime (HTTP pools, the request log's thread, caches) is created here, in
the app's startup, never at import time.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from hybrid_gateway.accounting.prices import Price
from hybrid_gateway.api.drain import InFlight
from hybrid_gateway.api.health import ChannelHealth, Lifecycle
from hybrid_gateway.api.ids import RequestIds
from hybrid_gateway.cache.exact import ExactCache, MemoryExactCache
from hybrid_gateway.cache.semantic.build import build_semantic_stage
from hybrid_gateway.cache.semantic.hygiene import compile_uncacheable
from hybrid_gateway.cache.semantic.stage import SemanticStage
from hybrid_gateway.config import GatewayConfig, read_api_key, resolve_path
from hybrid_gateway.embedding.factory import (
    SharedEmbedder,
    build_embedder,
    build_static_embedder,
)
from hybrid_gateway.learning.auditor import Auditor
from hybrid_gateway.learning.build import build_auditor
from hybrid_gateway.learning.build_update import build_router_update, live_model_slot
from hybrid_gateway.learning.metrics import AuditMetrics, RouterUpdateMetrics
from hybrid_gateway.learning.router_update import RouterUpdater
from hybrid_gateway.observability.build_log import build_request_log
from hybrid_gateway.observability.journaled_log import RequestLog
from hybrid_gateway.observability.logs import RequestLines
from hybrid_gateway.observability.metrics import GatewayMetrics
from hybrid_gateway.pipeline.gateway import Pipeline, PipelineParts
from hybrid_gateway.resilience.breaker import BreakerListener, BreakerSettings, CircuitBreaker
from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.resilience.degradation import Degradation
from hybrid_gateway.resilience.dispatch import Dispatcher, DispatchParts, LaneChannels
from hybrid_gateway.resilience.lanes import LaneGates
from hybrid_gateway.resilience.retry import RetryBudget, RetryPolicy
from hybrid_gateway.routing.build import build_router
from hybrid_gateway.routing.router import LiveModel
from hybrid_gateway.stores.health import StoreHealth
from hybrid_gateway.stores.shared import SharedState, build_shared_state
from hybrid_gateway.tenancy.admission import Tenancy, build_tenancy
from hybrid_gateway.types import RequestRecord
from hybrid_gateway.upstreams.pool.build import Upstream, build_upstream


@dataclass(slots=True)
class GatewayRuntime:
    config: GatewayConfig
    pipeline: Pipeline
    channels: dict[str, Upstream]
    exact_cache: MemoryExactCache | None
    request_log: RequestLog | None
    metrics: GatewayMetrics
    clock: Clock
    started_at: float
    model_ids: frozenset[str]
    ids: RequestIds
    tenancy: Tenancy
    # Lane gates, deadline fallback + results store + webhook, load shedding.
    degradation: Degradation
    # Consecutive failed requests per channel (/healthz) and the breakers (api/health.py).
    health: ChannelHealth
    dispatcher: Dispatcher
    # The semantic cache and the embedder it shares with the router (None when not configured).
    semantic: SemanticStage | None = None
    embedder: SharedEmbedder | None = None
    # The static embedder both cascades share (cache.semantic.cascade, routing.classifier.
    # cascade): one token table, one queue; None when neither is on.
    static: SharedEmbedder | None = None
    # stores.backend redis: the store and what lives in it (None: everything in this process).
    shared: SharedState | None = None
    # The console's request lines and retry/breaker events (observability/logs.py).
    lines: RequestLines = field(default_factory=RequestLines)
    # Starting, ready, draining (/readyz), and the chat requests in flight (api/drain.py).
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    inflight: InFlight = field(default_factory=InFlight)
    # learning.audit: sampled shadow audits of settled answers (None: off).
    auditor: Auditor | None = None
    # learning.router_update: the versioned classifier model the router reads, and the task
    # that trains, versions and follows it (None: off).
    router_live: LiveModel | None = None
    router_update: RouterUpdater | None = None

    def record_done(self, record: RequestRecord) -> None:
        """Log and count a finished request (before its response is acknowledged)."""
        self.tenancy.settle(record)
        if self.request_log is not None:
            self.request_log.write(record)
        self.metrics.observe(record)
        self.degradation.observe(record)
        self.health.observe(record)
        self.lines.request(record)

    async def aclose(self) -> None:
        await self.degradation.aclose()  # background requests first: they log as they stop
        if self.router_update is not None:
            await self.router_update.aclose()
        if self.auditor is not None:
            await self.auditor.aclose()
        for channel in self.channels.values():
            await channel.aclose()
        if self.exact_cache is not None:
            await self.exact_cache.aclose()
        if self.semantic is not None:
            await self.semantic.aclose()
        if self.embedder is not None:
            await self.embedder.aclose()
        if self.static is not None:
            await self.static.aclose()
        if self.shared is not None:
            await self.shared.aclose()  # last budget debits out before the log closes
        if self.request_log is not None:
            self.request_log.close()
        self.tenancy.aclose()


def build_runtime(
    config: GatewayConfig, *, config_path: str | Path | None, clock: Clock
) -> GatewayRuntime:
    source = str(config_path or "<config>")
    metrics = GatewayMetrics()
    channels = {
        name: build_upstream(
            name,
            ch,
            api_key=read_api_key(name, ch, source),
            ca_file=str(resolve_path(config_path, ch.ca_file)) if ch.ca_file else None,
            clock=clock,
            listeners=[metrics],  # channels with endpoints: per-endpoint metrics
        )
        for name, ch in config.channels.items()
    }
    prices = {
        name: Price(ch.price_per_1m_input, ch.price_per_1m_output)
        for name, ch in config.channels.items()
    }
    # One embedder for the semantic cache and the learned router stages, built when either
    # needs it (the bundled model loads in well under a second).
    embedder = (
        build_embedder(config.embedding, config_path)
        if config.cache.semantic.enabled or config.routing.learned
        else None
    )
    static = None
    if wants_static(config):  # the token file's outages: store_up{store="static_tokens"}
        listener = metrics.store_listener("static_tokens")
        static = build_static_embedder(config.embedding, config_path, listener)
    live = live_model_slot(config)  # learning.router_update: the versioned model
    router = build_router(config, config_path=config_path, embedder=embedder, live=live,
                          static=static)  # fmt: skip
    metrics.config_loaded.set(time.time())
    # stores.records: postgres: one health for this process's PostgreSQL calls (request log,
    # feedback, semantic vectors), so /healthz and the store_up gauge tell one story.
    pg_health = None
    if config.stores.records == "postgres":
        pg_health = StoreHealth(clock, retry_s=config.stores.retry_s)
        pg_health.listen(metrics.store_listener("postgres"))  # the gauge exists from the start
    semantic = (
        build_semantic_stage(config, config_path=config_path, clock=clock, embedder=embedder,
                             pg_health=pg_health, static=static)
        if embedder is not None and config.cache.semantic.enabled
        else None
    )  # fmt: skip
    shared = build_shared_state(
        config.stores, clock=clock, breaker=breaker_settings(config), source=source
    )
    exact_cfg = config.cache.exact
    exact = (
        MemoryExactCache(
            ttl_s=exact_cfg.ttl_s,
            max_entries=exact_cfg.max_entries,
            max_bytes=exact_cfg.max_bytes,
            clock=clock,
        )
        if exact_cfg.enabled and shared is None
        else None
    )
    pipeline_cache: ExactCache | None = exact
    if exact_cfg.enabled and shared is not None:
        pipeline_cache = shared.exact_cache(ttl_s=exact_cfg.ttl_s)
    # stores.records: sqlite (a file next to this process) or postgres (shared by replicas)
    request_log = build_request_log(config, config_path, health=pg_health)
    if shared is not None:
        shared.health.listen(metrics.store_listener("redis"))
    tenancy = build_tenancy(
        config, keys_path=resolve_path(config_path, config.auth.keys_path), clock=clock,
        log_query=request_log.query if request_log is not None else None, shared=shared,
    )  # fmt: skip

    lines = RequestLines()

    def log_late(record: RequestRecord) -> None:  # a late answer: its own row, its cost billed
        tenancy.settle(record)
        if request_log is not None:
            request_log.write(record)
        lines.request(record)

    degradation = Degradation.build(config, clock, log=log_late, listeners=[metrics])
    if shared is not None:
        degradation.results.share(shared.results_mirror())
    dispatcher = build_dispatcher(
        config, channels, clock, metrics, degradation.gates, shared, lines=lines
    )
    auditor = build_auditor(
        config, config_path, dispatcher=dispatcher, degradation=degradation, prices=prices,
        request_log=request_log, metrics=AuditMetrics(metrics.registry),
        semantic=semantic, clock=clock,
    )  # fmt: skip
    router_update = build_router_update(
        config, config_path, request_log=request_log, embedder=embedder, router=router,
        live=live, clock=clock, metrics=RouterUpdateMetrics(metrics.registry), static=static,
    )  # fmt: skip
    pipeline = Pipeline(
        PipelineParts(router=router, dispatcher=dispatcher, prices=prices,
                      exact_cache=pipeline_cache, clock=clock,
                      tiers=tenancy.tiers if tenancy.tiers.active else None,
                      deferred=degradation.deferred, shedder=degradation.shedder,
                      semantic=semantic, embedder=embedder,
                      uncacheable=compile_uncacheable(config.cache.semantic.uncacheable_patterns),
                      auditor=auditor)
    )  # fmt: skip
    return GatewayRuntime(
        config=config, pipeline=pipeline, channels=channels, exact_cache=exact,
        request_log=request_log, metrics=metrics, clock=clock, started_at=time.time(),
        model_ids=frozenset(m.id for m in config.models), ids=RequestIds(), tenancy=tenancy,
        degradation=degradation, semantic=semantic, embedder=embedder, static=static,
        shared=shared, health=ChannelHealth(list(channels), config.server.health.failed_requests),
        dispatcher=dispatcher, lines=lines, auditor=auditor, router_live=live,
        router_update=router_update,
    )  # fmt: skip


def wants_static(config: GatewayConfig) -> bool:
    """Whether a cascade is on: the semantic cache's or the classifier's."""
    semantic = config.cache.semantic
    classifier = config.routing.classifier
    return (semantic.enabled and semantic.cascade is not None) or (
        classifier is not None and classifier.cascade is not None
    )


def build_dispatcher(
    config: GatewayConfig,
    channels: dict[str, Upstream],
    clock: Clock,
    metrics: GatewayMetrics,
    gates: LaneGates | None = None,
    shared: SharedState | None = None,
    *,
    lines: RequestLines | None = None,
) -> Dispatcher:
    """Retry policy, budget and one breaker per channel, from ``config.resilience``.

    With ``shared`` the breakers also exchange their state through the shared store; ``lines``
    logs each retry and breaker transition.
    """
    events = [lines] if lines is not None else []
    retry, breaker = config.resilience.retry, config.resilience.breaker
    policy = (
        RetryPolicy(random.Random(), retry.backoff_s, retry.jitter, retry.max_retry_after_s)
        if retry.enabled
        else None
    )
    settings = breaker_settings(config)
    breakers = None
    if breaker.enabled:
        listeners: list[BreakerListener] = [metrics, *events]
        if shared is not None:
            listeners.append(shared.breakers)
        breakers = {name: CircuitBreaker(name, clock, settings, listeners) for name in channels}
        if shared is not None:
            shared.breakers.bind(breakers)
        for name in channels:
            metrics.breaker_state.set(0, (name,))
    lanes = {
        name: LaneChannels(
            channels[lane.channel],
            channels[lane.backup] if lane.backup is not None else None,
            retry_on_backup=lane.retry_on_backup,
        )
        for name, lane in config.lanes.items()
    }
    budget = RetryBudget(clock, ratio=retry.budget_ratio, min_per_s=retry.budget_min_per_s)
    return Dispatcher(
        DispatchParts(
            lanes, clock, budget, policy, breakers, [metrics, *events],
            max_elapsed_s=retry.max_elapsed_s, gates=gates,
        )
    )  # fmt: skip


def breaker_settings(config: GatewayConfig) -> BreakerSettings:
    breaker = config.resilience.breaker
    return BreakerSettings(
        window_s=breaker.window_s, min_requests=breaker.min_requests,
        error_rate=breaker.error_rate, open_s=breaker.open_s,
        half_open_probes=breaker.half_open_probes,
        min_distinct_callers=breaker.min_distinct_callers,
    )  # fmt: skip
