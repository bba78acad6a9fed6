"""Hot reload of pooled channels: their endpoints and balancing (``upstreams/pool/resize.py``).

Under ``channels`` a reload may change, for a channel listing ``endpoints`` both before and
after: ``endpoints`` (add, remove, reorder, a new weight or max_concurrency; the ``base_url``
the first endpoint fills changes with it) and ``balancing``.  Any other change under
``channels`` (a channel added or removed, its model, timeouts, max_concurrency, health, keys,
profile...), and going between ``base_url`` and ``endpoints``, needs a restart.

Each changed pool is prepared (new endpoints' clients built) with the other reloaded parts, and
swapped in with them; the swap logs, at WARNING, what was added, removed and retuned, and how
many requests the removed endpoints still have in flight (they finish there, then those
endpoints' connections close).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from hybrid_gateway.config import GatewayConfig
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.upstreams.pool.pool import EndpointPool
from hybrid_gateway.upstreams.pool.resize import EndpointChanges, PoolResize, prepare_resize

__all__ = ["POOL_KEYS", "pool_reloadable", "prepare_pools", "restart_reason"]

# Keys of a pooled channel that may differ in a reloaded file.
POOL_KEYS = frozenset({"endpoints", "balancing", "base_url"})

_log = logging.getLogger("hybrid_gateway.api.reload")


def _pooled_both(old: GatewayConfig, new: GatewayConfig, channel: str) -> bool:
    before, after = old.channels.get(channel), new.channels.get(channel)
    return (before is not None and after is not None
            and before.endpoints is not None and after.endpoints is not None)  # fmt: skip


def pool_reloadable(old: GatewayConfig, new: GatewayConfig, path: tuple[str, ...]) -> bool:
    """May the field at ``path`` differ?  (Only under ``channels``: the rest is reload.py's.)"""
    if len(path) < 3 or path[0] != "channels" or path[2] not in POOL_KEYS:
        return False
    return _pooled_both(old, new, path[1])


def restart_reason(old: GatewayConfig, new: GatewayConfig, path: tuple[str, ...]) -> str:
    """What the refusal adds for a field under ``channels`` ("" for any other)."""
    if path[0] != "channels":
        return ""
    if len(path) >= 3 and path[2] in POOL_KEYS and not _pooled_both(old, new, path[1]):
        return " (going between base_url and endpoints is not reloaded)"
    return ""


def prepare_pools(
    new: GatewayConfig,
    diffs: Iterable[tuple[str, ...]],
    channels: Mapping[str, object],
    source: str,
) -> tuple[list[Callable[[], None]], tuple[EndpointChanges, ...]]:
    """The swaps of the pooled channels ``diffs`` touch, and what each changes."""
    names = dict.fromkeys(d[1] for d in diffs if d[0] == "channels" and len(d) > 1)
    resizes: list[PoolResize] = []
    for name in names:
        pool = channels.get(name)
        if not isinstance(pool, EndpointPool) or pool.maker is None:  # (pool_reloadable said)
            raise ConfigError(source, f"channels.{name}", "unchanged: not a running pool")
        resizes.append(prepare_resize(pool, new.channels[name]))
    return [_swap(r) for r in resizes], tuple(r.changes for r in resizes)


def _swap(resize: PoolResize) -> Callable[[], None]:
    def swap() -> None:
        removed = resize.apply()
        draining = [f"{e.name} {e.in_flight}" for e in removed if e.in_flight]
        _log.warning(
            "channel %s endpoints reloaded: %s%s; in service: %s",
            resize.pool.name,
            resize.changes.describe(),
            f" (requests in flight finish on: {', '.join(draining)})" if draining else "",
            ", ".join(e.name for e in resize.pool.endpoints),
        )

    return swap
