"""Config sections for degradation: lane queues, deadline fallback, deferred results, shedding.

``lanes.NAME.queue`` bounds one lane's share of each channel it uses (so a flood on one lane
never takes the slots another lane needs, even when both use the same channel), and
``lanes.NAME.deadline_s`` + ``fallback_lane`` answer a slow lane from a faster one while the
slow answer keeps coming for later delivery.  ``resilience.deferred`` sizes what holds those
late answers (results store, background tasks, webhook); ``resilience.shedding`` answers
non-core traffic from the cache only while the gateway's error rate is high.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from hybrid_gateway.configbase import Fraction, NonNegFloat, PositiveFloat, PositiveInt, Strict

__all__ = [
    "DeferredConfig",
    "LaneQueueConfig",
    "SheddingConfig",
    "WebhookConfig",
]


class LaneQueueConfig(Strict):
    """One lane's slots on each of its channels (primary and backup, counted separately)."""

    max_concurrency: PositiveInt
    # Requests allowed to wait for a slot; one more is refused at once (503 lane_queue_full).
    max_waiting: Annotated[int, Field(ge=0)] = 64
    # A request that waited this long without a slot is refused (503 lane_queue_timeout).
    timeout_s: PositiveFloat = 5.0
    # Retry-After sent with those refusals.
    retry_after_s: PositiveFloat = 1.0


class WebhookConfig(Strict):
    """Where late answers are POSTed.  The URL comes from here only, never from a request."""

    url: Annotated[str, Field(pattern=r"^https?://")]
    # Tenants whose late answers are delivered; None = every tenant.
    tenants: tuple[str, ...] | None = None
    # One wait per retry after a failed delivery (connection error, 5xx, 429).
    backoff_s: tuple[NonNegFloat, ...] = (1.0, 5.0, 30.0)
    timeout_s: PositiveFloat = 10.0
    # Deliveries waiting or retrying at once; more are dropped (and counted) rather than queued.
    max_pending: PositiveInt = 1000


class DeferredConfig(Strict):
    """Late answers of requests that were answered from a fallback lane at their deadline."""

    # How long a finished (or still pending) result can be fetched.
    ttl_s: PositiveFloat = 3600.0
    max_entries: PositiveInt = 10_000
    # Slow requests kept running after their fallback answer; at the bound a request waits for
    # its own lane instead of falling back.
    max_background: PositiveInt = 256
    webhook: WebhookConfig | None = None


class SheddingConfig(Strict):
    """Cache-only answers for non-core tenants and apps while the error rate is high."""

    enabled: bool = False
    window_s: PositiveFloat = 30.0
    min_requests: PositiveInt = 20
    # Shedding starts at this share of 5xx answers over the window ...
    error_rate: Annotated[float, Field(gt=0, le=1)] = 0.2
    # ... and stops only once the share is back under this (hysteresis; <= error_rate).
    recover_rate: Fraction = 0.1
    # A shed request that misses the cache gets this message as a normal chat.completion.
    message: str = (
        "The service is under heavy load and this request could not be answered right now."
    )
    # Options offered with the message (each omitted when unset).
    retry_after_s: PositiveFloat | None = 30.0
    link: str | None = None
    # A model id that still answers during shedding (e.g. a light lane), offered as "a simpler
    # answer"; checked against ``models``.
    simpler_model: str | None = None
    status: Literal[200, 503] = 200

    @model_validator(mode="after")
    def _hysteresis(self) -> SheddingConfig:
        if self.recover_rate > self.error_rate:
            raise ValueError("recover_rate must be at most error_rate")
        return self
