"""Config of a channel served by several endpoints: the endpoints, the balancing policy, health.

``channels.NAME.endpoints`` lists the model servers behind one channel; ``balancing`` picks the
policy (``policies.py``, ``prefix.py``) and its knobs; ``health`` sets passive outlier
ejection and optional active checks (``health.py``).  A channel with ``base_url`` alone keeps
the single-client path and reads none of this.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field

from hybrid_gateway.configbase import NonNegFloat, PositiveFloat, PositiveInt, Strict

__all__ = [
    "ActiveCheckConfig", "BalancingConfig", "EndpointConfig", "EndpointHealthConfig",
    "endpoint_names",
]  # fmt: skip

PolicyName = Literal["round_robin", "least_outstanding", "prefix_affinity", "session"]


class EndpointConfig(Strict):
    """One model server of a channel (same model, same API)."""

    url: Annotated[str, Field(pattern=r"^https?://")]
    # Shown in x-gateway-route, the request log, /healthz and metrics; default: host:port/path.
    name: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    # Share of round_robin's picks; least_outstanding and the load guards divide load by it.
    weight: PositiveFloat = 1.0
    # Requests in flight to this endpoint; default: the channel's max_concurrency.
    max_concurrency: PositiveInt | None = None


class BalancingConfig(Strict):
    policy: PolicyName = "least_outstanding"
    # prefix_affinity: the rendered conversation is cut in blocks of this many characters
    # (about 64 tokens), each block hashed with all blocks before it.
    block_chars: Annotated[int, Field(ge=16, le=65536)] = 256
    # prefix_affinity: go where the longest known prefix is, if it covers this share of the
    # request's blocks; below it, the least loaded endpoint (SGLang cache_aware: 0.3).
    match_threshold: Annotated[float, Field(ge=0, le=1)] = 0.3
    # prefix_affinity: the endpoints whose match is at most this share of the request's blocks
    # shorter than the longest (and still above match_threshold) count as holding it too; the
    # least loaded of them takes the request.  A conversation the guard once moved has two
    # homes, and its next turns go to whichever is less busy for the prefill of a few
    # messages.  0: only the longest match's endpoints.
    match_slack: Annotated[float, Field(ge=0, le=1)] = 0.3
    # prefix_affinity: block hashes remembered over all endpoints (LRU beyond it).
    max_blocks: Annotated[int, Field(ge=64, le=10_000_000)] = 200_000
    # prefix_affinity load guard: an endpoint is passed over (for a shorter match's, else the
    # least loaded) when its in-flight count n is both more than balance_abs above the
    # candidates' mean and more than balance_rel times it (SGLang's form, against the mean
    # rather than the least loaded): n - mean > balance_abs and n > balance_rel * mean.
    # The defaults trip at 2 in flight when the mean is 1.5, at 3 when it is 2, at 126 when it
    # is 100.
    balance_abs: NonNegFloat = 0.25
    balance_rel: Annotated[float, Field(ge=1)] = 1.25
    # session: the key is the request's `user`, or this request header when given (the header
    # wins when both are present); requests without a key go least_outstanding.
    session_header: Annotated[str, Field(min_length=1, max_length=128)] | None = None


class ActiveCheckConfig(Strict):
    # GET this path on each endpoint's origin (vLLM, SGLang, llama.cpp: /health; any
    # OpenAI-compatible server: /v1/models); a 2xx is healthy.
    path: Annotated[str, Field(pattern=r"^/")] = "/health"
    interval_s: PositiveFloat = 5.0
    timeout_s: PositiveFloat = 2.0


class EndpointHealthConfig(Strict):
    # This many failures in a row (connection errors, 502-504 / other 5xx, timeouts, broken
    # streams) eject the endpoint.
    consecutive_failures: PositiveInt = 3
    # Out for base_ejection_s, doubled with each ejection in a row (capped), then one probe
    # request; its success takes the endpoint back, its failure ejects it again.
    base_ejection_s: PositiveFloat = 1.0
    max_ejection_s: PositiveFloat = 30.0
    # Optional active checks (none by default): a failed check ejects, a passed one while
    # ejected takes the endpoint back at once.
    active: ActiveCheckConfig | None = None


def endpoint_names(endpoints: Sequence[EndpointConfig]) -> list[str]:
    """Each endpoint's name: its own, else host:port (plus the path when that is shared)."""
    netlocs = [urlsplit(e.url).netloc for e in endpoints]
    names = []
    for endpoint, netloc in zip(endpoints, netlocs, strict=True):
        if endpoint.name is not None:
            names.append(endpoint.name)
        elif netlocs.count(netloc) == 1:
            names.append(netloc)
        else:
            names.append(netloc + urlsplit(endpoint.url).path.rstrip("/"))
    return names
