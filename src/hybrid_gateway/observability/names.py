"""Prometheus metric names: stable, documented in docs/metrics.md, defined only here."""

from __future__ import annotations

REQUESTS = "hybrid_gateway_requests"  # counter: model, lane, channel, cache, status
REQUEST_SECONDS = "hybrid_gateway_request_duration_seconds"  # histogram: lane, stream
UPSTREAM_SECONDS = "hybrid_gateway_upstream_duration_seconds"  # histogram: channel
TTFT_SECONDS = "hybrid_gateway_time_to_first_token_seconds"  # histogram: channel
UPSTREAM_ERRORS = "hybrid_gateway_upstream_errors"  # counter: channel, code
TOKENS = "hybrid_gateway_tokens"  # counter: channel, kind (prompt|completion)
COST_USD = "hybrid_gateway_cost_usd"  # counter: channel
CACHE_SAVED_USD = "hybrid_gateway_cache_saved_usd"  # counter: cache (what the hit would have cost)
CACHE_ENTRIES = "hybrid_gateway_exact_cache_entries"  # gauge
CACHE_BYTES = "hybrid_gateway_exact_cache_bytes"  # gauge
BREAKER_STATE = "hybrid_gateway_breaker_state"  # gauge: channel (0 closed, 1 half-open, 2 open)
BREAKER_TRANSITIONS = "hybrid_gateway_breaker_transitions"  # counter: channel, to
RETRIES = "hybrid_gateway_retries"  # counter: channel, code (the failure that was retried)
