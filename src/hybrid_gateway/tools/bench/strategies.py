"""The strategies `bench run` compares: each builds a gateway config from the base config.

A strategy is a function ``(base, upstreams, request_log) -> config dict``: ``base`` is the
base config as loaded from YAML (prices, channel settings, routing rules and anything newer
pass through untouched), ``upstreams`` maps a lane name (``light``, ``heavy``) to the base URL
(``http://127.0.0.1:PORT/v1``) of the emulator that plays it, and ``request_log`` is where the
gateway writes its request log.  The gateway always listens on 127.0.0.1 and a free port.

- ``heavy-only``: no rules, default lane heavy, every cache off: the seed's baseline.
- ``hybrid``: the base config's routing rules, every cache off.
- ``hybrid-cache``: the base config's rules with the exact cache on.
- ``full``: the whole article, ``examples/gateway-full.yaml`` (shipped in the package as
  ``hybrid_gateway/examples/gateway-full.yaml``): rules, the calibrated classifier and gates,
  exact + semantic cache, lane queues, retries, breakers with a backup channel, the heavy lane's
  deadline fallback, shedding, replica pools (one endpoint per lane here), upstream profiles,
  audits with the threshold that follows them; its classifier (model, threshold, student, and
  light rules handed to it) is replaced by the one ``bench run`` learned before the run
  (``learned_router.py``), when it learned one.  Channel models and prices come from the base
  config, so its cost is comparable with the others'; the backup channel points at the heavy
  emulator too; the audits' ``llm`` judge is replaced by the emulator's quality marks.
- ``full-no-classifier``, ``full-no-semantic``, ``full-no-degrade``: ``full`` with one part
  removed (the classifier; the semantic cache; retries, breakers and backup, the deadline
  fallback and shedding), so the rows show what each part is worth.

The first three have no degradation either (retries and breakers off), as the article's rows
"heavy model only" and "hybrid routing, no cache, no degradation": an upstream error reaches
the client, which is what the ``article`` emulator profile's error rate measures.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "FULL_CONFIG",
    "STRATEGIES",
    "STRATEGY_NOTES",
    "Strategy",
    "channel_of_lane",
    "full",
    "full_no_classifier",
    "full_no_degrade",
    "full_no_semantic",
    "heavy_only",
    "hybrid",
    "hybrid_cache",
]

# The packaged copy of examples/gateway-full.yaml (a link to it in a source checkout).
FULL_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "gateway-full.yaml"

JsonDict = dict[str, Any]
Strategy = Callable[[Mapping[str, Any], Mapping[str, str], Path], JsonDict]


def heavy_only(
    base: Mapping[str, Any], upstreams: Mapping[str, str], request_log: Path
) -> JsonDict:
    config = _common(base, upstreams, request_log)
    config["routing"] = {**config.get("routing", {}), "default_lane": "heavy", "rules": []}
    _caches_off(config)
    _no_degradation(config)
    return config


def hybrid(base: Mapping[str, Any], upstreams: Mapping[str, str], request_log: Path) -> JsonDict:
    config = _common(base, upstreams, request_log)
    _caches_off(config)
    _no_degradation(config)
    return config


def hybrid_cache(
    base: Mapping[str, Any], upstreams: Mapping[str, str], request_log: Path
) -> JsonDict:
    config = _common(base, upstreams, request_log)
    cache = config.setdefault("cache", {})
    cache["exact"] = {**cache.get("exact", {}), "enabled": True}
    _no_degradation(config)
    return config


def full(base: Mapping[str, Any], upstreams: Mapping[str, str], request_log: Path) -> JsonDict:
    """``examples/gateway-full.yaml`` on the bench's emulators, with the base config's prices."""
    config: JsonDict = yaml.safe_load(FULL_CONFIG.read_text(encoding="utf-8"))
    for lane, url in upstreams.items():
        priced = {k: v for k, v in channel_of_lane(base, lane).items() if k in _PRICED}
        names = [config["lanes"][lane]["channel"], config["lanes"][lane].get("backup")]
        for name in filter(None, names):
            config["channels"][name] = _pointed_at({**config["channels"][name], **priced}, url)
    config = _common(config, {}, request_log)
    semantic = config.get("cache", {}).get("semantic")
    if isinstance(semantic, dict) and semantic.get("path"):
        semantic["path"] = str(request_log.with_name("semantic-cache.sqlite3"))
    static = config.get("embedding", {}).get("static")
    if isinstance(static, dict) and static.get("table_path"):  # each run starts cold, as before
        static["table_path"] = str(request_log.with_name("static-tokens.sqlite3"))
    judge = config.get("learning", {}).get("audit", {}).get("judge")
    if isinstance(judge, dict) and judge.get("kind") == "llm":
        # the emulator cannot compare two answers; its quality marks are the judge here
        config["learning"]["audit"]["judge"] = {"kind": "marks"}
    return config


def _pointed_at(channel: JsonDict, url: str) -> JsonDict:
    """``channel`` served by the one emulator at ``url``: a pool keeps its policy and health
    settings with that one endpoint (the bench runs one server per lane for every strategy)."""
    if channel.get("endpoints"):
        first = dict(channel["endpoints"][0])
        return {**channel, "endpoints": [{**first, "url": url}]}
    return {**channel, "base_url": url}


def full_no_classifier(
    base: Mapping[str, Any], upstreams: Mapping[str, str], request_log: Path
) -> JsonDict:
    """``full`` without the learned stage: what no rule decides goes to the default lane, and
    rules that hand a request to the classifier are gone (the next rule decides it)."""
    config = full(base, upstreams, request_log)
    config["routing"]["classifier"] = None
    config["routing"]["exemplars"] = None
    rules = config["routing"].get("rules") or []
    config["routing"]["rules"] = [r for r in rules if r.get("action") != "classifier"]
    update = config.get("learning", {}).get("router_update")
    if isinstance(update, dict):  # nothing left to retrain
        update["enabled"] = False
    return config


def full_no_semantic(
    base: Mapping[str, Any], upstreams: Mapping[str, str], request_log: Path
) -> JsonDict:
    config = full(base, upstreams, request_log)
    config["cache"]["semantic"]["enabled"] = False
    learning = config.get("learning", {})
    if isinstance(learning.get("cache_threshold"), dict):  # no semantic threshold to move
        learning["cache_threshold"]["enabled"] = False
    return config


def full_no_degrade(
    base: Mapping[str, Any], upstreams: Mapping[str, str], request_log: Path
) -> JsonDict:
    """``full`` without the article's degradation (section 7) and shedding; lane queues stay."""
    config = full(base, upstreams, request_log)
    _no_degradation(config)
    return config


STRATEGIES: Mapping[str, Strategy] = {
    "heavy-only": heavy_only,
    "hybrid": hybrid,
    "hybrid-cache": hybrid_cache,
    "full": full,
    "full-no-classifier": full_no_classifier,
    "full-no-semantic": full_no_semantic,
    "full-no-degrade": full_no_degrade,
}

STRATEGY_NOTES: Mapping[str, str] = {
    "heavy-only": "every request to the heavy lane; no rules; caches off; no retries or breakers",
    "hybrid": "the base config's routing rules; caches off; no retries or breakers",
    "hybrid-cache": "the base config's routing rules + exact cache; no retries or breakers",
    "full": "examples/gateway-full.yaml: rules, classifier (static cascade; learned before the "
    "run from a labelled sample unless --router-sample-size 0) and gates, exact + semantic "
    "cache (static cascade, write-behind), lane queues, retries, "
    "breakers + backup, heavy deadline fallback (on the first token), shedding, replica "
    "pools, upstream profiles, audits (marks judge) + learned cache threshold",
    "full-no-classifier": "full without the classifier (unruled requests go to the default lane)",
    "full-no-semantic": "full without the semantic cache (exact cache only)",
    "full-no-degrade": "full without retries, breakers + backup, deadline fallback and shedding",
}

_PRICED = ("model", "price_per_1m_input", "price_per_1m_output")


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


def _no_degradation(config: JsonDict) -> None:
    """Retries, breakers (and so backups), deadline fallbacks and shedding off; queues stay."""
    resilience = config.setdefault("resilience", {})
    for name in ("retry", "breaker", "shedding"):
        resilience[name] = {**(resilience.get(name) or {}), "enabled": False}
    for lane in config.get("lanes", {}).values():
        for key in (
            "backup",
            "retry_on_backup",
            "deadline_s",
            "fallback_lane",
            "deadline_on",
            "stall_s",
        ):
            lane.pop(key, None)


def _caches_off(config: JsonDict) -> None:
    """Switch off every cache layer the config has (exact today; semantic once it exists)."""
    cache = config.setdefault("cache", {})
    cache["exact"] = {**cache.get("exact", {}), "enabled": False}
    for name, layer in list(cache.items()):
        if isinstance(layer, dict) and "enabled" in layer:
            cache[name] = {**layer, "enabled": False}
