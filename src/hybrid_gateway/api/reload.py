"""Hot reload on SIGHUP (``serve``) or ``POST /admin/reload``: routing, tenants, limits, the
semantic cache's decision, and pooled channels' endpoints and balancing.

The config file is read and validated again and compared with the config in force, field by
field.  These may differ:

    routing                  rules, gates, exemplars, the classifier and its threshold: a new
                             router (``Pipeline.replace_router``)
    tenants, limits          tiers, budgets, rate quotas, core flags, cache scopes, the global
                             bucket: new tenancy parts that keep the rate buckets' levels and
                             the budget spend (``tenancy/reload.py``)
    cache.semantic.<key>     the decision only: threshold, guards, target_precision,
                             calibrated_on, verifier, verifier_threshold, reranker.min_score,
                             reranker.cosine_weight
                             (``SemanticStage.replace_decision``); entries, index, store and
                             embedder stay
    channels.<name>.endpoints, .balancing
                             of a channel with endpoints before and after: the pool changes in
                             place (``reload_pools.py``, ``upstreams/pool/resize.py``)

Everything is built first (a router, a verifier loaded from its file, limiters, budget plans);
only when all of it is built are the new objects swapped in, with plain assignments and no
await in between, so a request sees the old parts or the new ones, never a mix.  Nothing in
flight is dropped: a request already routed keeps its decision and the channel, breaker and
lane objects it holds; one already admitted settles against the carried-over buckets and book.

A file that fails to load, or that changes any other field (any other channel field, a
channel going between base_url and endpoints, lanes, models, server, the exact cache,
cache.semantic's store path/bounds/enabled/reranker model, embedding, resilience, auth,
stores), is rejected and the old config stays in force: those own sockets,
threads and stored entries, and they change only with a restart.  The admin call answers 400
``config_rejected`` with the ``ConfigError``'s file, field (the first such field, dotted) and
expectation; SIGHUP logs the same line.

With ``--workers N`` each worker process reloads on its own: signal every worker (the admin call
reaches only the worker that accepts it).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from hybrid_gateway.api.admin import admin_only
from hybrid_gateway.api.reload_pools import pool_reloadable, prepare_pools, restart_reason
from hybrid_gateway.api.routes import RUNTIME
from hybrid_gateway.api.runtime import GatewayRuntime
from hybrid_gateway.cache.semantic.build import build_rule, shared_scopes
from hybrid_gateway.config import GatewayConfig, load_config
from hybrid_gateway.errors import ConfigError, RequestError
from hybrid_gateway.routing.build import build_router
from hybrid_gateway.tenancy.reload import prepare_tenancy
from hybrid_gateway.upstreams.pool.resize import EndpointChanges

__all__ = ["RELOADABLE", "ReloadResult", "mount", "reload_on_sighup", "reload_runtime"]

# Top-level config sections that may differ in a reloaded file, whole.
RELOADABLE = frozenset({"routing", "tenants", "limits"})
# The keys of cache.semantic that may differ: the hit decision, not the entries.
SEMANTIC_DECISION = frozenset(
    {"threshold", "guards", "target_precision", "calibrated_on", "verifier", "verifier_threshold"}
)
_SEMANTIC = ("cache", "semantic")
_RERANKER = ("cache", "semantic", "reranker")
_RERANK_RULE = frozenset({"min_score", "cosine_weight"})  # the reranker's part of the decision
_ABSENT = object()

_log = logging.getLogger(__name__)


class ReloadRejected(RequestError):
    status = 400
    code = "config_rejected"


@dataclass(frozen=True, slots=True)
class ReloadResult:
    sha256: str  # of the file now in force
    loaded_at: float  # epoch seconds
    changed: tuple[str, ...]  # the sections that differed (empty: the file was unchanged)
    endpoints: tuple[EndpointChanges, ...] = ()  # per pooled channel changed: what changed


@dataclass(frozen=True, slots=True)
class _Source:
    path: Path | None  # None: the app was built from a config object, with no file


_SOURCE = web.AppKey("config_source", _Source)


def reload_runtime(runtime: GatewayRuntime, path: Path) -> ReloadResult:
    """Load ``path``, check it changes only reloadable fields, build the new parts, swap them in.

    Raises ``ConfigError`` (and counts a rejection) with the old config untouched.
    """
    try:
        raw = _read(path)
        new = load_config(path)
        old = runtime.config
        diffs = list(differences(old, new))
        fixed = [d for d in diffs if not reloadable(d) and not pool_reloadable(old, new, d)]
        if fixed:
            field = ".".join(fixed[0])
            raise ConfigError(
                str(path),
                field,
                "unchanged: only routing, tenants, limits, the semantic cache's decision "
                f"(cache.semantic: {', '.join(sorted(SEMANTIC_DECISION))}, reranker.min_score, "
                "reranker.cosine_weight) and a pooled channel's endpoints and balancing "
                f"reload; a change to {field} needs a restart{restart_reason(old, new, fixed[0])}",
            )
        changed = _sections(diffs)
        swaps = _build(runtime, new, path, changed)
        pool_swaps, endpoints = prepare_pools(new, diffs, runtime.channels, str(path))
        swaps += pool_swaps
    except ConfigError:
        runtime.metrics.config_reloads.inc(("rejected",))
        raise
    for swap in swaps:  # everything is built: swap it all in, no await in between
        swap()
    runtime.config = new
    loaded_at = time.time()
    runtime.metrics.config_reloads.inc(("ok",))
    runtime.metrics.config_loaded.set(loaded_at)
    return ReloadResult(hashlib.sha256(raw).hexdigest(), loaded_at, changed, endpoints)


def _build(
    runtime: GatewayRuntime, new: GatewayConfig, path: Path, changed: tuple[str, ...]
) -> list[Callable[[], None]]:
    """Build every new part for the ``changed`` sections; return the swaps that put them in."""
    swaps: list[Callable[[], None]] = []
    pipeline = runtime.pipeline
    if "routing" in changed:
        classifier = new.routing.classifier
        if classifier is not None and classifier.cascade is not None and runtime.static is None:
            raise ConfigError(str(path), "routing.classifier.cascade", "unchanged: the static "
                              "embedder is built at start-up; turning the cascade on needs a "
                              "restart")  # fmt: skip
        router = build_router(new, config_path=path, embedder=runtime.embedder,
                              live=runtime.router_live,  # a versioned model stays in use
                              static=runtime.static)  # fmt: skip
        swaps.append(partial(pipeline.replace_router, router))
    stage = runtime.semantic
    if "cache.semantic" in changed and stage is not None and runtime.embedder is not None:
        cfg = new.cache.semantic
        rule = build_rule(cfg, path, runtime.embedder.namespace)
        swaps.append(partial(stage.replace_decision, rule, cfg.reranker))
    if "tenants" in changed or "limits" in changed:
        if runtime.request_log is not None:
            runtime.request_log.flush()  # spend summed from the log counts every settled row
        tenancy = prepare_tenancy(runtime.tenancy, new, shared=runtime.shared)
        shedder = runtime.degradation.shedder
        scopes = shared_scopes(new)

        def swap_tenancy() -> None:
            pipeline.replace_tiers(tenancy.apply())
            if shedder is not None:
                shedder.replace_tenants(new.tenants)
            if stage is not None:
                stage.replace_scopes(scopes)

        swaps.append(swap_tenancy)
    return swaps


def differences(old: GatewayConfig, new: GatewayConfig) -> Iterator[tuple[str, ...]]:
    """The dotted paths (as tuples) of the fields that differ, as the file spells them."""
    before = old.model_dump(mode="json", by_alias=True)
    after = new.model_dump(mode="json", by_alias=True)
    return _diff(before, after, ())


def _diff(before: Any, after: Any, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    if isinstance(before, dict) and isinstance(after, dict):
        for key in [*before, *(k for k in after if k not in before)]:
            yield from _diff(before.get(key, _ABSENT), after.get(key, _ABSENT), (*path, key))
    elif before != after:
        yield path


def reloadable(path: tuple[str, ...]) -> bool:
    if path[0] in RELOADABLE:
        return True
    if path[:2] != _SEMANTIC or len(path) < 3:
        return False
    rerank_rule = len(path) == 4 and path[:3] == _RERANKER and path[3] in _RERANK_RULE
    return path[2] in SEMANTIC_DECISION or rerank_rule


def _sections(diffs: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The changed sections in file order (``cache.semantic`` for the semantic cache)."""
    names = [".".join(d[:2]) if d[0] == "cache" else d[0] for d in diffs]
    return tuple(dict.fromkeys(names))


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(str(path), "<file>", f"a readable file ({exc.strerror})") from None


def _reload_app(app: web.Application) -> ReloadResult:
    path = app[_SOURCE].path
    if path is None:
        raise ConfigError("<config>", "<file>", "a config file to reload from (serve --config)")
    return reload_runtime(app[RUNTIME], path)


async def _reload(request: web.Request) -> web.StreamResponse:
    try:
        result = _reload_app(request.app)
    except ConfigError as exc:
        _log.warning("config reload rejected: %s", exc)
        raise ReloadRejected(
            f"Config reload rejected, the old config stays in force: {exc}", param=exc.field
        ) from None
    _log.warning("config reloaded (%s): sections changed: %s", result.sha256[:12], result.changed)
    payload: dict[str, Any] = {
        "object": "gateway.config_reload",
        "status": "reloaded",
        "sha256": result.sha256,
        "loaded_at": result.loaded_at,
        "changed": list(result.changed),
        "endpoints": [change.as_json() for change in result.endpoints],
    }
    return web.json_response(payload, dumps=lambda obj: orjson.dumps(obj).decode())


def _on_sighup(app: web.Application) -> None:
    try:
        result = _reload_app(app)
    except ConfigError as exc:
        _log.error("config reload (SIGHUP) rejected, the old config stays in force: %s", exc)
        return
    _log.warning("config reloaded on SIGHUP (%s): sections changed: %s",
                 result.sha256[:12], result.changed)  # fmt: skip


def reload_on_sighup(app: web.Application) -> None:
    """Reload on SIGHUP; ``serve`` calls this once the app runs (a handler is process-wide)."""
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, _on_sighup, app)


def mount(app: web.Application, config_path: str | Path | None) -> None:
    app[_SOURCE] = _Source(Path(config_path) if config_path is not None else None)
    app.router.add_post("/admin/reload", admin_only(_reload))
