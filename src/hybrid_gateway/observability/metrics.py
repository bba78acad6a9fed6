"""The gateway's Prometheus metrics, on a registry owned by one app (no global registry)."""

from __future__ import annotations

from hybrid_gateway.observability import names
from hybrid_gateway.observability.prom import Counter, Gauge, Histogram, Registry
from hybrid_gateway.resilience.breaker import BreakerState
from hybrid_gateway.types import RequestRecord

_BREAKER_LEVEL = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 8, 12, 20, 30, 60)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = r = Registry()
        self.requests = r.add(Counter(
            names.REQUESTS, "Chat completion requests answered",
            ["model", "lane", "channel", "cache", "status"],
        ))  # fmt: skip
        self.request_seconds = r.add(Histogram(
            names.REQUEST_SECONDS, "End-to-end request latency at the gateway",
            ["lane", "stream"], _LATENCY_BUCKETS,
        ))  # fmt: skip
        self.upstream_seconds = r.add(Histogram(
            names.UPSTREAM_SECONDS, "Upstream call latency (to the last byte)",
            ["channel"], _LATENCY_BUCKETS,
        ))  # fmt: skip
        self.ttft_seconds = r.add(Histogram(
            names.TTFT_SECONDS, "Time to the first streamed token from the upstream",
            ["channel"], _LATENCY_BUCKETS,
        ))  # fmt: skip
        self.upstream_errors = r.add(
            Counter(names.UPSTREAM_ERRORS, "Upstream failures by cause", ["channel", "code"])
        )
        self.tokens = r.add(Counter(names.TOKENS, "Tokens billed", ["channel", "kind"]))
        self.cost_usd = r.add(Counter(names.COST_USD, "Upstream cost in USD", ["channel"]))
        self.cache_saved_usd = r.add(
            Counter(names.CACHE_SAVED_USD, "Upstream cost avoided by cache hits", ["cache"])
        )
        self.cache_entries = r.add(Gauge(names.CACHE_ENTRIES, "Exact cache entries"))
        self.cache_bytes = r.add(Gauge(names.CACHE_BYTES, "Exact cache size in bytes"))
        self.breaker_state = r.add(Gauge(
            names.BREAKER_STATE, "Circuit breaker state: 0 closed, 1 half-open, 2 open", ["channel"]
        ))  # fmt: skip
        self.breaker_transitions = r.add(Counter(
            names.BREAKER_TRANSITIONS, "Circuit breaker state changes", ["channel", "to"]
        ))  # fmt: skip
        self.retries = r.add(
            Counter(names.RETRIES, "Upstream attempts retried, by failure", ["channel", "code"])
        )

    # -- listener hooks (resilience/breaker.py, resilience/dispatch.py) ----------------------
    def state_change(self, channel: str, old: BreakerState, new: BreakerState) -> None:
        self.breaker_state.set(_BREAKER_LEVEL[new], (channel,))
        self.breaker_transitions.inc((channel, new.value))

    def retry(self, channel: str, code: str) -> None:
        self.retries.inc((channel, code))

    def observe(self, record: RequestRecord) -> None:
        route = record.route
        lane = route.lane if route else "none"
        channel = route.channel if route else "none"
        self.requests.inc((record.model, lane, channel, record.cache.value, str(record.status)))
        self.request_seconds.observe(
            record.latency_ms / 1000, (lane, "true" if record.stream else "false")
        )
        by_channel = (channel,)
        if record.upstream_ms is not None:
            self.upstream_seconds.observe(record.upstream_ms / 1000, by_channel)
            usage = record.usage
            if usage is not None:
                self.tokens.inc((channel, "prompt"), usage.prompt_tokens)
                self.tokens.inc((channel, "completion"), usage.completion_tokens)
        if record.ttft_ms is not None:
            self.ttft_seconds.observe(record.ttft_ms / 1000, by_channel)
        if record.cost_usd > 0:
            self.cost_usd.inc(by_channel, record.cost_usd)
        saved = record.extra.get("saved_usd")
        if isinstance(saved, float) and saved > 0:
            self.cache_saved_usd.inc((record.cache.value,), saved)
        if record.error_code and record.error_code.startswith("upstream_"):
            self.upstream_errors.inc((channel, record.error_code))

    def render(self) -> bytes:
        return self.registry.render()
