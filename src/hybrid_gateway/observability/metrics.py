"""The gateway's Prometheus metrics, on a registry owned by one app (no global registry)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from hybrid_gateway.observability import names
from hybrid_gateway.types import RequestRecord

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 8, 12, 20, 30, 60)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            names.REQUESTS, "Chat completion requests answered",
            ["model", "lane", "channel", "cache", "status"], registry=r,
        )  # fmt: skip
        self.request_seconds = Histogram(
            names.REQUEST_SECONDS, "End-to-end request latency at the gateway",
            ["lane", "stream"], buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.upstream_seconds = Histogram(
            names.UPSTREAM_SECONDS, "Upstream call latency (to the last byte)",
            ["channel"], buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.ttft_seconds = Histogram(
            names.TTFT_SECONDS, "Time to the first streamed token from the upstream",
            ["channel"], buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.upstream_errors = Counter(
            names.UPSTREAM_ERRORS, "Upstream failures by cause", ["channel", "code"], registry=r
        )
        self.tokens = Counter(names.TOKENS, "Tokens billed", ["channel", "kind"], registry=r)
        self.cost_usd = Counter(names.COST_USD, "Upstream cost in USD", ["channel"], registry=r)
        self.cache_saved_usd = Counter(
            names.CACHE_SAVED_USD, "Upstream cost avoided by cache hits", ["cache"], registry=r
        )
        self.cache_entries = Gauge(names.CACHE_ENTRIES, "Exact cache entries", registry=r)
        self.cache_bytes = Gauge(names.CACHE_BYTES, "Exact cache size in bytes", registry=r)

    def observe(self, record: RequestRecord) -> None:
        route = record.route
        lane = route.lane if route else "none"
        channel = route.channel if route else "none"
        self.requests.labels(
            record.model, lane, channel, record.cache.value, str(record.status)
        ).inc()
        self.request_seconds.labels(lane, "true" if record.stream else "false").observe(
            record.latency_ms / 1000
        )
        if record.upstream_ms is not None:
            self.upstream_seconds.labels(channel).observe(record.upstream_ms / 1000)
        if record.ttft_ms is not None:
            self.ttft_seconds.labels(channel).observe(record.ttft_ms / 1000)
        usage = record.usage
        if usage is not None and record.cost_usd > 0:
            self.cost_usd.labels(channel).inc(record.cost_usd)
        if usage is not None and record.upstream_ms is not None:
            self.tokens.labels(channel, "prompt").inc(usage.prompt_tokens)
            self.tokens.labels(channel, "completion").inc(usage.completion_tokens)
        saved = record.extra.get("saved_usd")
        if isinstance(saved, float) and saved > 0:
            self.cache_saved_usd.labels(record.cache.value).inc(saved)
        if record.error_code and record.error_code.startswith("upstream_"):
            self.upstream_errors.labels(channel, record.error_code).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
