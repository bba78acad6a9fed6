"""Build the gateway's runtime objects from the config tree, and close them again.

Everything with a lifetime (HTTP pools, the request log's thread, caches) is created here, in
the app's startup, never at import time.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

from hybrid_gateway.accounting.prices import Price
from hybrid_gateway.api.ids import RequestIds
from hybrid_gateway.cache.exact import MemoryExactCache
from hybrid_gateway.config import GatewayConfig, read_api_key, resolve_path
from hybrid_gateway.observability.metrics import GatewayMetrics
from hybrid_gateway.observability.request_log import SqliteRequestLog
from hybrid_gateway.pipeline.gateway import Pipeline, PipelineParts
from hybrid_gateway.resilience.breaker import BreakerSettings, CircuitBreaker
from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.resilience.dispatch import Dispatcher, DispatchParts, LaneChannels
from hybrid_gateway.resilience.retry import RetryBudget, RetryPolicy
from hybrid_gateway.routing.rules import RuleRouter
from hybrid_gateway.types import RequestRecord
from hybrid_gateway.upstreams.openai_http import OpenAIChannel


@dataclass(slots=True)
class GatewayRuntime:
    config: GatewayConfig
    pipeline: Pipeline
    channels: dict[str, OpenAIChannel]
    exact_cache: MemoryExactCache | None
    request_log: SqliteRequestLog | None
    metrics: GatewayMetrics
    clock: Clock
    started_at: float
    model_ids: frozenset[str]
    ids: RequestIds

    def record_done(self, record: RequestRecord) -> None:
        """Log and count a finished request (before its response is acknowledged)."""
        if self.request_log is not None:
            self.request_log.write(record)
        self.metrics.observe(record)

    async def aclose(self) -> None:
        for channel in self.channels.values():
            await channel.aclose()
        if self.exact_cache is not None:
            await self.exact_cache.aclose()
        if self.request_log is not None:
            self.request_log.close()


def build_runtime(
    config: GatewayConfig, *, config_path: str | Path | None, clock: Clock
) -> GatewayRuntime:
    source = str(config_path or "<config>")
    channels = {
        name: OpenAIChannel(
            name,
            ch,
            api_key=read_api_key(name, ch, source),
            ca_file=str(resolve_path(config_path, ch.ca_file)) if ch.ca_file else None,
        )
        for name, ch in config.channels.items()
    }
    prices = {
        name: Price(ch.price_per_1m_input, ch.price_per_1m_output)
        for name, ch in config.channels.items()
    }
    router = RuleRouter(
        rules=config.routing.rules,
        default_lane=config.routing.default_lane,
        lane_channels={name: lane.channel for name, lane in config.lanes.items()},
        model_lanes={m.id: m.lane for m in config.models},
    )
    exact_cfg = config.cache.exact
    exact = (
        MemoryExactCache(
            ttl_s=exact_cfg.ttl_s,
            max_entries=exact_cfg.max_entries,
            max_bytes=exact_cfg.max_bytes,
            clock=clock,
        )
        if exact_cfg.enabled
        else None
    )
    log_cfg = config.server.request_log
    request_log = (
        SqliteRequestLog(
            resolve_path(config_path, log_cfg.path),
            flush_interval_s=log_cfg.flush_interval_ms / 1000,
        )
        if log_cfg.enabled
        else None
    )
    metrics = GatewayMetrics()
    dispatcher = build_dispatcher(config, channels, clock, metrics)
    pipeline = Pipeline(
        PipelineParts(router=router, dispatcher=dispatcher, prices=prices, exact_cache=exact,
                      clock=clock)
    )  # fmt: skip
    return GatewayRuntime(
        config=config, pipeline=pipeline, channels=channels, exact_cache=exact,
        request_log=request_log, metrics=metrics, clock=clock, started_at=time.time(),
        model_ids=frozenset(m.id for m in config.models), ids=RequestIds(),
    )  # fmt: skip


def build_dispatcher(
    config: GatewayConfig,
    channels: dict[str, OpenAIChannel],
    clock: Clock,
    metrics: GatewayMetrics,
) -> Dispatcher:
    """Retry policy, budget and one breaker per channel, from ``config.resilience``."""
    retry, breaker = config.resilience.retry, config.resilience.breaker
    policy = (
        RetryPolicy(random.Random(), retry.backoff_s, retry.jitter, retry.max_retry_after_s)
        if retry.enabled
        else None
    )
    settings = BreakerSettings(
        window_s=breaker.window_s, min_requests=breaker.min_requests,
        error_rate=breaker.error_rate, open_s=breaker.open_s,
        half_open_probes=breaker.half_open_probes,
    )  # fmt: skip
    breakers = None
    if breaker.enabled:
        breakers = {name: CircuitBreaker(name, clock, settings, [metrics]) for name in channels}
        for name in channels:
            metrics.breaker_state.set(0, (name,))
    lanes = {
        name: LaneChannels(
            channels[lane.channel], channels[lane.backup] if lane.backup is not None else None
        )
        for name, lane in config.lanes.items()
    }
    budget = RetryBudget(clock, ratio=retry.budget_ratio, min_per_s=retry.budget_min_per_s)
    return Dispatcher(
        DispatchParts(
            lanes, clock, budget, policy, breakers, [metrics], max_elapsed_s=retry.max_elapsed_s
        )
    )
