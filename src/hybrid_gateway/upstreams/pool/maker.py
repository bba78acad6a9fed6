"""How a pool's endpoints and policy are made: at start-up (``build.py``) and by a reload that
adds endpoints or changes the policy (``resize.py``), with the same client settings."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from hybrid_gateway.config import ChannelConfig
from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.upstreams.openai_http import OpenAIChannel
from hybrid_gateway.upstreams.pool.endpoint import Endpoint
from hybrid_gateway.upstreams.pool.health import EndpointHealth
from hybrid_gateway.upstreams.pool.policies import POLICIES, Policy
from hybrid_gateway.upstreams.pool.settings import EndpointConfig

__all__ = ["EndpointMaker"]


@dataclass(frozen=True, slots=True)
class EndpointMaker:
    channel: str
    api_key: str | None
    ca_file: str | None
    clock: Clock
    rng: random.Random

    def endpoint(self, config: ChannelConfig, index: int, spec: EndpointConfig,
                 name: str) -> Endpoint:  # fmt: skip
        """A new endpoint: its own client (keep-alive pool, slots), healthy, no latency yet."""
        slots = spec.max_concurrency or config.max_concurrency
        own = config.model_copy(update={"base_url": spec.url, "max_concurrency": slots})
        health = config.health
        return Endpoint(
            index=index, name=name, url=spec.url, weight=spec.weight, max_concurrency=slots,
            client=OpenAIChannel(self.channel, own, api_key=self.api_key, ca_file=self.ca_file),
            health=EndpointHealth(
                self.clock, consecutive_failures=health.consecutive_failures,
                base_ejection_s=health.base_ejection_s, max_ejection_s=health.max_ejection_s,
            ),
        )  # fmt: skip

    def policy(self, config: ChannelConfig, endpoints: Sequence[Endpoint]) -> Policy:
        """The channel's policy over ``endpoints`` (numbered 0..n-1), knowing nothing yet."""
        return POLICIES[config.balancing.policy](config.balancing, endpoints, self.rng)
