"""What /healthz shows of the channels with endpoints: each endpoint's state, and problems."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict

from hybrid_gateway.upstreams.pool.pool import EndpointPool

__all__ = ["endpoint_report"]


def endpoint_report(
    channels: Mapping[str, object],
) -> tuple[dict[str, list[dict[str, object]]], list[dict[str, object]]]:
    """Per pooled channel, its endpoints (state, in flight, latency, ejections), those a reload
    removed last with state ``draining`` while requests to them finish; and a problem for each
    endpoint in service not healthy (``endpoint_ejected`` / ``endpoint_probing``)."""
    pools: dict[str, list[dict[str, object]]] = {}
    problems: list[dict[str, object]] = []
    for name in sorted(channels):
        upstream = channels[name]
        if not isinstance(upstream, EndpointPool):
            continue
        statuses = upstream.status()
        pools[name] = [asdict(status) for status in statuses]
        problems.extend(
            {"channel": name, "endpoint": status.name, "problem": f"endpoint_{status.state}"}
            for status in statuses
            if status.state not in ("healthy", "draining")
        )
    return pools, problems
