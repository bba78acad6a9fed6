"""A reload's change to a pooled channel's endpoints and balancing, prepared before the swap.

An endpoint is the same one across a reload when both its name and its URL are (the name
defaults to host:port, ``settings.endpoint_names``); it keeps its client and connections, its
in-flight count, latency estimate, health and ejection state, and what the policy knows of it
(prefix_affinity's blocks, session's ring points).  A new weight or ``max_concurrency`` is
applied to it in place (``Endpoint.retune``; fewer slots are taken back as requests finish).
Any other endpoint listed is new: healthy and unmeasured, as at start-up.  One no longer listed
is removed: never picked again from the swap on, it drains (``pool.py``).

``balancing``: a new ``policy`` or ``block_chars`` makes a new policy (whatever the old one
learnt is dropped: the blocks are cut differently); other knobs (``match_threshold``,
``match_slack``, ``max_blocks``, ``balance_abs``, ``balance_rel``, ``session_header``) apply to
the policy in force, which keeps its state.

``prepare_resize`` builds the new endpoints (clients, health) and changes nothing;
``PoolResize.apply`` swaps them in, with no await, so a request sees the old set or the new.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from hybrid_gateway.config import ChannelConfig
from hybrid_gateway.upstreams.pool.endpoint import Endpoint
from hybrid_gateway.upstreams.pool.pool import EndpointPool
from hybrid_gateway.upstreams.pool.settings import endpoint_names

__all__ = ["EndpointChanges", "PoolResize", "prepare_resize"]


@dataclass(frozen=True, slots=True)
class EndpointChanges:
    """What a reload changes in one pooled channel (names as metrics and /healthz show them)."""

    channel: str
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    # kept endpoints with a new weight or max_concurrency: "name: weight 1 -> 2"
    retuned: tuple[str, ...] = ()
    # "" (balancing unchanged), "knobs" (applied to the policy in force), or "new <policy>"
    balancing: str = ""

    def describe(self) -> str:
        parts = [f"{label} {', '.join(names)}" for label, names in
                 (("added", self.added), ("removed", self.removed), ("retuned", self.retuned))
                 if names]  # fmt: skip
        if self.balancing:
            parts.append(f"balancing: {self.balancing}")
        return "; ".join(parts) or "the same endpoints (order or spelling only)"

    def as_json(self) -> dict[str, Any]:
        return {"channel": self.channel, "added": list(self.added),
                "removed": list(self.removed), "retuned": list(self.retuned),
                "balancing": self.balancing}  # fmt: skip


@dataclass(frozen=True, slots=True)
class PoolResize:
    pool: EndpointPool
    config: ChannelConfig
    endpoints: tuple[Endpoint, ...]  # in the new order: kept (the same objects) and new
    tunes: tuple[tuple[Endpoint, float, int], ...]  # kept endpoints: new weight and slots
    new_policy: bool
    changes: EndpointChanges

    def apply(self) -> list[Endpoint]:
        """Swap the new set in; returns the removed endpoints (draining)."""
        for endpoint, weight, slots in self.tunes:
            endpoint.retune(weight, slots)
        maker = self.pool.maker
        fresh = partial(maker.policy, self.config) if self.new_policy and maker else None
        return self.pool.replace_endpoints(self.config, self.endpoints, fresh)


def prepare_resize(pool: EndpointPool, config: ChannelConfig) -> PoolResize:
    """The pool as ``config`` lists it: new endpoints built, nothing applied yet."""
    maker = pool.maker
    if config.endpoints is None or maker is None:
        raise ValueError(f"channel {pool.name}: a pool built with its endpoints' maker")
    current = {(e.name, e.url): e for e in pool.endpoints}
    endpoints: list[Endpoint] = []
    tunes: list[tuple[Endpoint, float, int]] = []
    added: list[str] = []
    retuned: list[str] = []
    for i, (spec, name) in enumerate(
        zip(config.endpoints, endpoint_names(config.endpoints), strict=True)
    ):
        kept = current.pop((name, spec.url), None)
        if kept is None:
            endpoints.append(maker.endpoint(config, i, spec, name))
            added.append(name)
            continue
        endpoints.append(kept)
        slots = spec.max_concurrency or config.max_concurrency
        diff = _retuned(kept, spec.weight, slots)
        if diff:
            tunes.append((kept, spec.weight, slots))
            retuned.append(f"{name}: {diff}")
    old, new = pool.config.balancing, config.balancing
    fresh = (old.policy, old.block_chars) != (new.policy, new.block_chars)
    balancing = f"new {new.policy}" if fresh else ("knobs" if old != new else "")
    changes = EndpointChanges(pool.name, tuple(added), tuple(e.name for e in current.values()),
                              tuple(retuned), balancing)  # fmt: skip
    return PoolResize(pool, config, tuple(endpoints), tuple(tunes), fresh, changes)


def _retuned(endpoint: Endpoint, weight: float, slots: int) -> str:
    parts: Sequence[str] = [
        f"{label} {before:g} -> {after:g}"
        for label, before, after in (("weight", endpoint.weight, weight),
                                     ("max_concurrency", endpoint.max_concurrency, slots))
        if before != after
    ]  # fmt: skip
    return ", ".join(parts)
