"""The strategies `bench run` compares: each builds a gateway config from the base config.

A strategy is a function ``(base, upstreams, request_log) -> config dict``: ``base`` is the
base config as loaded from YAML (prices, channel settings, routing rules and anything newer
pass through untouched), ``upstreams`` maps a lane name (``light``, ``heavy``) to the base URL
(``http://127.0.0.1:PORT/v1``) of the emulator that plays it, and ``request_log`` is where the
gateway writes its request log.  The gateway always listens on 127.0.0.1 and a free port.

- ``heavy-only``: no rules, default lane heavy, every cache off: the seed's baseline.
- ``hybrid``: the base config's routing rules, every cache off.
- ``hybrid-cache``: the base config's rules with the exact cache on.  The semantic cache is
  measured on labelled pairs (``cache eval``, ``bench semantic``) and degradation under faults
  and overload (``bench degrade``); neither is switched on in this strategy.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "STRATEGIES",
    "STRATEGY_NOTES",
    "Strategy",
    "channel_of_lane",
    "heavy_only",
    "hybrid",
    "hybrid_cache",
]

JsonDict = dict[str, Any]
Strategy = Callable[[Mapping[str, Any], Mapping[str, str], Path], JsonDict]


def heavy_only(
    base: Mapping[str, Any], upstreams: Mapping[str, str], request_log: Path
) -> JsonDict:
    config = _common(base, upstreams, request_log)
    config["routing"] = {**config.get("routing", {}), "default_lane": "heavy", "rules": []}
    _caches_off(config)
    return config


def hybrid(base: Mapping[str, Any], upstreams: Mapping[str, str], request_log: Path) -> JsonDict:
    config = _common(base, upstreams, request_log)
    _caches_off(config)
    return config


def hybrid_cache(
    base: Mapping[str, Any], upstreams: Mapping[str, str], request_log: Path
) -> JsonDict:
    config = _common(base, upstreams, request_log)
    cache = config.setdefault("cache", {})
    cache["exact"] = {**cache.get("exact", {}), "enabled": True}
    return config


STRATEGIES: Mapping[str, Strategy] = {
    "heavy-only": heavy_only,
    "hybrid": hybrid,
    "hybrid-cache": hybrid_cache,
}

STRATEGY_NOTES: Mapping[str, str] = {
    "heavy-only": "every request to the heavy lane; no rules; caches off",
    "hybrid": "the base config's routing rules; caches off",
    "hybrid-cache": "the base config's routing rules + exact cache (semantic cache: "
    "`cache eval`; degradation: `bench degrade`)",
}


def channel_of_lane(config: Mapping[str, Any], lane: str) -> JsonDict:
    """The channel mapping that serves ``lane`` in ``config``; KeyError when there is none."""
    name = config["lanes"][lane]["channel"]
    channel: JsonDict = config["channels"][name]
    return channel


def _common(base: Mapping[str, Any], upstreams: Mapping[str, str], request_log: Path) -> JsonDict:
    config: JsonDict = copy.deepcopy(dict(base))
    server = config.setdefault("server", {})
    server["host"] = "127.0.0.1"
    server["port"] = 0
    server["request_log"] = {
        **server.get("request_log", {}),
        "path": str(request_log),
        "enabled": True,
    }
    for lane, url in upstreams.items():
        channel_of_lane(config, lane)["base_url"] = url
    return config


def _caches_off(config: JsonDict) -> None:
    """Switch off every cache layer the config has (exact today; semantic once it exists)."""
    cache = config.setdefault("cache", {})
    cache["exact"] = {**cache.get("exact", {}), "enabled": False}
    for name, layer in list(cache.items()):
        if isinstance(layer, dict) and "enabled" in layer:
            cache[name] = {**layer, "enabled": False}
