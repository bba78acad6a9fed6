"""Build a channel's upstream: the single client for ``base_url``, a pool for ``endpoints``."""

from __future__ import annotations

import random
from collections.abc import Sequence

from hybrid_gateway.config import ChannelConfig
from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.upstreams.openai_http import OpenAIChannel
from hybrid_gateway.upstreams.pool.active import ActiveChecks
from hybrid_gateway.upstreams.pool.maker import EndpointMaker
from hybrid_gateway.upstreams.pool.pool import EndpointListener, EndpointPool
from hybrid_gateway.upstreams.pool.settings import endpoint_names

__all__ = ["Upstream", "build_pool", "build_upstream"]

Upstream = OpenAIChannel | EndpointPool


def build_upstream(
    name: str,
    config: ChannelConfig,
    *,
    api_key: str | None,
    ca_file: str | None,
    clock: Clock,
    listeners: Sequence[EndpointListener] = (),
    rng: random.Random | None = None,
) -> Upstream:
    if config.endpoints is None:
        return OpenAIChannel(name, config, api_key=api_key, ca_file=ca_file)
    return build_pool(name, config, api_key=api_key, ca_file=ca_file, clock=clock,
                      listeners=listeners, rng=rng or random.Random())  # fmt: skip


def build_pool(
    name: str,
    config: ChannelConfig,
    *,
    api_key: str | None,
    ca_file: str | None,
    clock: Clock,
    listeners: Sequence[EndpointListener],
    rng: random.Random,
) -> EndpointPool:
    assert config.endpoints is not None
    maker = EndpointMaker(name, api_key, ca_file, clock, rng)
    labels = zip(config.endpoints, endpoint_names(config.endpoints), strict=True)
    endpoints = [maker.endpoint(config, i, spec, label) for i, (spec, label) in enumerate(labels)]
    checks = None
    if config.health.active is not None:
        auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        checks = ActiveChecks(endpoints, config.health.active, clock, headers=auth,
                              ca_file=ca_file)  # fmt: skip
    pool = EndpointPool(name, config, endpoints, maker.policy(config, endpoints), clock,
                        listeners=listeners, maker=maker, checks=checks)  # fmt: skip
    for endpoint in endpoints:
        for listener in listeners:  # every endpoint's gauges exist from the start
            listener.endpoint_state(name, endpoint.name, endpoint.health.state.value)
    return pool
