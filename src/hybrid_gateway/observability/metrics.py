"""The gateway's Prometheus metrics, on a registry owned by one app (no global registry)."""

from __future__ import annotations

from collections.abc import Mapping

from hybrid_gateway.observability import names
from hybrid_gateway.observability.prom import Counter, Gauge, Histogram, Registry
from hybrid_gateway.resilience.breaker import BreakerState
from hybrid_gateway.types import RequestRecord

_BREAKER_LEVEL = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}
_GC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
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
            ["lane", "channel"], _LATENCY_BUCKETS,
        ))  # fmt: skip
        self.ttft_seconds = r.add(Histogram(
            names.TTFT_SECONDS, "Time to the first streamed token from the upstream",
            ["lane", "channel"], _LATENCY_BUCKETS,
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
        self.store_up = r.add(
            Gauge(names.STORE_UP, "Shared store reachable (1) or down (0)", ["store"])
        )
        self.store_errors = r.add(
            Counter(names.STORE_ERRORS, "Shared store commands that failed", ["store", "op"])
        )
        self.retries = r.add(
            Counter(names.RETRIES, "Upstream attempts retried, by failure", ["channel", "code"])
        )
        self.asyncio_tasks = r.add(Gauge(names.ASYNCIO_TASKS, "asyncio tasks alive in the loop"))
        self.gc_pause_seconds = r.add(Histogram(
            names.GC_PAUSE_SECONDS, "Cyclic garbage collector pauses (observability/gc_pacer.py)",
            ["generation"], _GC_BUCKETS,
        ))  # fmt: skip
        self.upstream_idle = r.add(Gauge(
            names.UPSTREAM_IDLE_CONNECTIONS, "Keep-alive upstream connections idle in the pool",
            ["channel"],
        ))  # fmt: skip
        by_endpoint = ["channel", "endpoint"]
        self.endpoint_up = r.add(Gauge(
            names.ENDPOINT_UP, "Endpoint healthy (1) or ejected / awaiting its probe (0)",
            by_endpoint,
        ))  # fmt: skip
        self.endpoint_in_flight = r.add(
            Gauge(names.ENDPOINT_IN_FLIGHT, "Requests in flight to the endpoint", by_endpoint)
        )
        self.endpoint_attempts = r.add(Counter(
            names.ENDPOINT_ATTEMPTS, "Attempts sent to the endpoint, by health outcome",
            [*by_endpoint, "outcome"],
        ))  # fmt: skip
        self.endpoint_ejections = r.add(
            Counter(names.ENDPOINT_EJECTIONS, "Times the endpoint was ejected", by_endpoint)
        )
        self.stream_resumes = r.add(Counter(
            names.STREAM_RESUMES, "Streams broken mid-way on the endpoint, by what resuming did",
            [*by_endpoint, "outcome"],
        ))  # fmt: skip
        self.route_decisions = r.add(Counter(
            names.ROUTE_DECISIONS, "Routing decisions by lane and the rule that chose it",
            ["lane", "rule"],
        ))  # fmt: skip
        self.feedback = r.add(Counter(
            names.FEEDBACK, "Answer ratings received (POST /v1/feedback)",
            ["lane", "cache", "rating", "reason"],
        ))  # fmt: skip
        by_tenant = ["tenant", "app", "lane", "channel", "model"]
        self.tenant_requests = r.add(
            Counter(names.TENANT_REQUESTS, "Chat requests per tenant and app", by_tenant)
        )
        self.tenant_cost_usd = r.add(
            Counter(names.TENANT_COST_USD, "Upstream cost per tenant and app", by_tenant)
        )
        self.tenant_saved_usd = r.add(Counter(
            names.TENANT_SAVED_USD, "Upstream cost avoided by cache hits, per tenant", by_tenant
        ))  # fmt: skip
        self.queue_wait_seconds = r.add(Histogram(
            names.QUEUE_WAIT_SECONDS, "Wait for a slot in the lane's queue before dispatch",
            ["lane"], _LATENCY_BUCKETS,
        ))  # fmt: skip
        self.config_reloads = r.add(Counter(
            names.CONFIG_RELOADS, "Config reloads (SIGHUP, POST /admin/reload) by outcome",
            ["outcome"],
        ))  # fmt: skip
        self.config_loaded = r.add(
            Gauge(names.CONFIG_LOADED, "When the config in force was loaded (Unix seconds)")
        )
        self._degradation_metrics(r)

    def _degradation_metrics(self, r: Registry) -> None:
        lane_channel = ["lane", "channel"]
        self.lane_queue_depth = r.add(
            Gauge(names.LANE_QUEUE_DEPTH, "Requests waiting for a lane slot", lane_channel)
        )
        self.lane_in_flight = r.add(
            Gauge(names.LANE_IN_FLIGHT, "Requests holding a lane slot", lane_channel)
        )
        self.lane_rejected = r.add(Counter(
            names.LANE_REJECTED, "Requests refused by a lane queue (503)", [*lane_channel, "code"]
        ))  # fmt: skip
        self.fallbacks = r.add(
            Counter(names.FALLBACKS, "Answers marked x-gateway-fallback, by kind", ["kind"])
        )
        self.deferred_total = r.add(Counter(
            names.DEFERRED, "Deadline fallbacks and how their slow requests ended",
            ["lane", "outcome"],
        ))  # fmt: skip
        self.deferred_running = r.add(
            Gauge(names.DEFERRED_RUNNING, "Slow requests still running after their fallback")
        )
        self.deferred_results = r.add(
            Gauge(names.DEFERRED_RESULTS, "Entries in the deferred results store")
        )
        self.webhook_deliveries = r.add(
            Counter(names.WEBHOOK_DELIVERIES, "Late answers pushed to the webhook", ["outcome"])
        )
        self.shedding_active = r.add(
            Gauge(names.SHEDDING_ACTIVE, "1 while non-core traffic is answered from cache only")
        )

    # -- degradation hooks (resilience/degradation.py, deadline.py; results/webhook.py) ------
    def lane_queue(self, lane: str, channel: str, waiting: int, active: int) -> None:
        self.lane_queue_depth.set(waiting, (lane, channel))
        self.lane_in_flight.set(active, (lane, channel))

    def lane_rejected_total(self, lane: str, channel: str, code: str, total: int) -> None:
        self.lane_rejected.values[(lane, channel, code)] = float(total)  # the gate's own count

    def degradation(self, background: int, results: int, shedding: bool) -> None:
        self.deferred_running.set(background)
        self.deferred_results.set(results)
        self.shedding_active.set(1 if shedding else 0)

    def deferred(self, lane: str, outcome: str) -> None:
        self.deferred_total.inc((lane, outcome))

    def observe_late(self, record: RequestRecord) -> None:
        """A slow request that finished after its fallback answer: its tokens and cost."""
        channel = record.route.channel if record.route else "none"
        if record.usage is not None and record.upstream_ms is not None:
            self.tokens.inc((channel, "prompt"), record.usage.prompt_tokens)
            self.tokens.inc((channel, "completion"), record.usage.completion_tokens)
        if record.cost_usd > 0:
            self.cost_usd.inc((channel,), record.cost_usd)
            # the tenant's cost too (not another request: its client already counted one)
            lane = record.route.lane if record.route else "none"
            tenant = (record.tenant, record.app, lane, channel, record.model)
            self.tenant_cost_usd.inc(tenant, record.cost_usd)

    def webhook(self, outcome: str) -> None:
        self.webhook_deliveries.inc((outcome,))

    def observe_loop(self, tasks: int, idle_connections: Mapping[str, int]) -> None:
        """At scrape time: what a leak would grow (tasks; connections not back in the pool)."""
        self.asyncio_tasks.set(tasks)
        for channel, idle in idle_connections.items():
            self.upstream_idle.set(idle, (channel,))

    # -- endpoint pools (upstreams/pool/pool.py: EndpointListener) ---------------------------
    def endpoint_state(self, channel: str, endpoint: str, state: str) -> None:
        self.endpoint_up.set(1 if state == "healthy" else 0, (channel, endpoint))
        if state == "ejected":
            self.endpoint_ejections.inc((channel, endpoint))

    def endpoint_load(self, channel: str, endpoint: str, in_flight: int) -> None:
        self.endpoint_in_flight.set(in_flight, (channel, endpoint))

    def endpoint_result(self, channel: str, endpoint: str, outcome: str) -> None:
        self.endpoint_attempts.inc((channel, endpoint, outcome))

    def stream_resume(self, channel: str, endpoint: str, outcome: str) -> None:
        self.stream_resumes.inc((channel, endpoint, outcome))

    def endpoint_removed(self, channel: str, endpoint: str) -> None:
        """A reload removed the endpoint: its series stop being exported (a scrape sees them go
        stale, as a restart would), so the per-endpoint families show the set in service."""
        for family in (self.endpoint_up, self.endpoint_in_flight, self.endpoint_ejections,
                       self.endpoint_attempts):  # fmt: skip
            for labels in [k for k in family.values if k[:2] == (channel, endpoint)]:
                del family.values[labels]

    # -- listener hooks (resilience/breaker.py, resilience/dispatch.py) ----------------------
    def state_change(self, channel: str, old: BreakerState, new: BreakerState) -> None:
        self.breaker_state.set(_BREAKER_LEVEL[new], (channel,))
        self.breaker_transitions.inc((channel, new.value))

    def store_listener(self, store: str) -> StoreMetrics:
        """A ``StoreListener`` for one shared store: ``redis`` or ``postgres``."""
        return StoreMetrics(self, store)

    def gc_pause(self, generation: int, seconds: float) -> None:
        """A ``gc_pacer.Observe``."""
        self.gc_pause_seconds.observe(seconds, (str(generation),))

    def retry(self, channel: str, code: str) -> None:
        self.retries.inc((channel, code))

    def feedback_received(self, lane: str, cache: str, rating: str, reason: str) -> None:
        """A rating; thumbs-down on cache hits (``cache`` != miss) are the false-hit reports."""
        self.feedback.inc((lane, cache, rating, reason))

    def observe(self, record: RequestRecord) -> None:
        route = record.route
        lane = route.lane if route else "none"
        channel = route.channel if route else "none"
        # A model id the gateway does not serve is the client's string: as a label value it
        # would let any client grow the registry without bound.
        model = "unknown" if record.error_code == "model_not_found" else record.model
        self.requests.inc((model, lane, channel, record.cache.value, str(record.status)))
        self.request_seconds.observe(
            record.latency_ms / 1000, (lane, "true" if record.stream else "false")
        )
        by_channel = (channel,)
        if route is not None:
            self.route_decisions.inc((lane, route.rule))
        queue_ms = record.extra.get("queue_ms")  # set by lanes with a queue (dispatch._slot)
        if isinstance(queue_ms, float):
            self.queue_wait_seconds.observe(queue_ms / 1000, (lane,))
        if record.upstream_ms is not None:
            self.upstream_seconds.observe(record.upstream_ms / 1000, (lane, channel))
            usage = record.usage
            if usage is not None:
                self.tokens.inc((channel, "prompt"), usage.prompt_tokens)
                self.tokens.inc((channel, "completion"), usage.completion_tokens)
        if record.ttft_ms is not None:
            self.ttft_seconds.observe(record.ttft_ms / 1000, (lane, channel))
        if record.cost_usd > 0:
            self.cost_usd.inc(by_channel, record.cost_usd)
        saved = record.extra.get("saved_usd")
        if isinstance(saved, float) and saved > 0:
            self.cache_saved_usd.inc((record.cache.value,), saved)
        tenant = (record.tenant, record.app, lane, channel, model)
        self.tenant_requests.inc(tenant)
        self.tenant_cost_usd.inc(tenant, record.cost_usd)
        if isinstance(saved, float) and saved > 0:
            self.tenant_saved_usd.inc(tenant, saved)
        if record.error_code and record.error_code.startswith("upstream_"):
            self.upstream_errors.inc((channel, record.error_code))
        if record.fallback is not None:
            self.fallbacks.inc((record.fallback,))

    def render(self) -> bytes:
        return self.registry.render()


class StoreMetrics:
    """``hybrid_gateway_store_up{store}`` and ``..._errors_total{store,op}`` of one store."""

    def __init__(self, metrics: GatewayMetrics, store: str) -> None:
        self._metrics = metrics
        self._store = store

    def store_state(self, up: bool) -> None:
        self._metrics.store_up.set(1 if up else 0, (self._store,))

    def store_error(self, op: str) -> None:
        self._metrics.store_errors.inc((self._store, op))
