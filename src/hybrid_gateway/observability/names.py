"""Prometheus metric names: stable, documented in docs/metrics.md, defined only here."""

from __future__ import annotations

REQUESTS = "hybrid_gateway_requests"  # counter: model, lane, channel, cache, status
REQUEST_SECONDS = "hybrid_gateway_request_duration_seconds"  # histogram: lane, stream
UPSTREAM_SECONDS = "hybrid_gateway_upstream_duration_seconds"  # histogram: lane, channel
TTFT_SECONDS = "hybrid_gateway_time_to_first_token_seconds"  # histogram: lane, channel
UPSTREAM_ERRORS = "hybrid_gateway_upstream_errors"  # counter: channel, code
TOKENS = "hybrid_gateway_tokens"  # counter: channel, kind (prompt|completion)
COST_USD = "hybrid_gateway_cost_usd"  # counter: channel
CACHE_SAVED_USD = "hybrid_gateway_cache_saved_usd"  # counter: cache (what the hit would have cost)
CACHE_ENTRIES = "hybrid_gateway_exact_cache_entries"  # gauge
CACHE_BYTES = "hybrid_gateway_exact_cache_bytes"  # gauge
BREAKER_STATE = "hybrid_gateway_breaker_state"  # gauge: channel (0 closed, 1 half-open, 2 open)
BREAKER_TRANSITIONS = "hybrid_gateway_breaker_transitions"  # counter: channel, to
RETRIES = "hybrid_gateway_retries"  # counter: channel, code (the failure that was retried)
# Leak watch (bench soak): both are read when /metrics is scraped.
ASYNCIO_TASKS = "hybrid_gateway_asyncio_tasks"  # gauge: tasks alive in the gateway's event loop
GC_PAUSE_SECONDS = "hybrid_gateway_gc_pause_seconds"  # histogram: cyclic GC pauses, by generation
UPSTREAM_IDLE_CONNECTIONS = "hybrid_gateway_upstream_idle_connections"  # gauge: channel
# Degradation (resilience/lanes.py, deadline.py, shedding.py; results/webhook.py)
LANE_QUEUE_DEPTH = "hybrid_gateway_lane_queue_depth"  # gauge: lane, channel (waiting for a slot)
LANE_IN_FLIGHT = "hybrid_gateway_lane_in_flight"  # gauge: lane, channel (holding a slot)
LANE_REJECTED = "hybrid_gateway_lane_rejected"  # counter: lane, channel, code (queue full|timeout)
FALLBACKS = "hybrid_gateway_fallbacks"  # counter: kind (breaker|timeout|shed), answers marked so
DEFERRED = "hybrid_gateway_deferred"  # counter: lane, outcome (fallback|done|failed|cancelled)
DEFERRED_RUNNING = "hybrid_gateway_deferred_running"  # gauge: slow requests still running
DEFERRED_RESULTS = "hybrid_gateway_deferred_results"  # gauge: entries in the results store
WEBHOOK_DELIVERIES = "hybrid_gateway_webhook_deliveries"  # counter: outcome (delivered|failed|…)
SHEDDING_ACTIVE = "hybrid_gateway_shedding_active"  # gauge: 1 while non-core traffic is shed
# Shared stores (stores/: backend redis, records postgres); label store (redis|postgres)
STORE_UP = "hybrid_gateway_store_up"  # gauge: 1 while the shared store answers, 0 while it is down
# counter: store, op (redis: take|spend|get|set|breaker|ping;
# postgres: insert|query|expire|feedback, and the semantic cache's)
STORE_ERRORS = "hybrid_gateway_store_errors"
ROUTE_DECISIONS = "hybrid_gateway_route_decisions"  # counter: lane, rule (cache hits included)
FEEDBACK = "hybrid_gateway_feedback"  # counter: lane, cache, rating (up|down), reason (or "none")
QUEUE_WAIT_SECONDS = "hybrid_gateway_queue_wait_seconds"  # histogram: lane (lanes with a queue)
# Channels with several endpoints (upstreams/pool/): labels channel, endpoint
ENDPOINT_UP = "hybrid_gateway_endpoint_up"  # gauge: 1 healthy, 0 ejected or awaiting its probe
ENDPOINT_IN_FLIGHT = "hybrid_gateway_endpoint_in_flight"  # gauge: requests in flight
ENDPOINT_ATTEMPTS = "hybrid_gateway_endpoint_attempts"  # counter: + outcome (success|failure|…)
ENDPOINT_EJECTIONS = "hybrid_gateway_endpoint_ejections"  # counter: times ejected
# counter: streams broken mid-way, by channel, endpoint (the one that broke) and outcome
# (resumed | unavailable: no other endpoint answered | given_up: the resend differed)
STREAM_RESUMES = "hybrid_gateway_stream_resumes"
# Cost accounting (tenancy): counters by tenant, app, lane, channel, model.  Cost per 1,000
# requests = 1000 * rate(..._tenant_cost_usd_total) / rate(..._tenant_requests_total).
TENANT_REQUESTS = "hybrid_gateway_tenant_requests"  # cache hits and errors included
TENANT_COST_USD = "hybrid_gateway_tenant_cost_usd"  # upstream cost (0 for a cache hit)
TENANT_SAVED_USD = "hybrid_gateway_tenant_saved_usd"  # what cache hits would have cost
# Hot reload (api/reload.py)
CONFIG_RELOADS = "hybrid_gateway_config_reloads"  # counter: outcome (ok|rejected)
CONFIG_LOADED = "hybrid_gateway_config_loaded_timestamp_seconds"  # gauge: config in force since
