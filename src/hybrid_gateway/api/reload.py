"""Hot reload of the routing section: on SIGHUP (``serve``) or ``POST /admin/reload``.

The config file is read and validated again; when the only section that differs from the
config in force is ``routing`` (rules, gates, exemplars, the classifier and its threshold), a new
router is built and swapped into the pipeline in one assignment (``Pipeline.replace_router``).
Nothing in flight is dropped: a request already routed keeps its decision and the channel,
breaker and lane objects it holds, all of which stay as they were.

A file that fails to load, or that changes any other section (channels, lanes, models, server,
caches, embedding, resilience, auth, tenants, limits, stores), is rejected and the old config
stays in force: those sections own sockets, threads, bucket state and budget spend, and they
change only with a restart.  The admin call answers 400 ``config_rejected`` with the
``ConfigError``'s file, field and expectation; SIGHUP logs the same line.

With ``--workers N`` each worker process reloads on its own: signal every worker (the admin call
reaches only the worker that accepts it).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from hybrid_gateway.api.admin import admin_only
from hybrid_gateway.api.routes import RUNTIME
from hybrid_gateway.api.runtime import GatewayRuntime
from hybrid_gateway.config import GatewayConfig, load_config
from hybrid_gateway.errors import ConfigError, RequestError
from hybrid_gateway.routing.build import build_router

__all__ = ["RELOADABLE", "ReloadResult", "mount", "reload_on_sighup", "reload_runtime"]

# Top-level config sections that may differ in a reloaded file.
RELOADABLE = frozenset({"routing"})

_log = logging.getLogger(__name__)


class ReloadRejected(RequestError):
    status = 400
    code = "config_rejected"


@dataclass(frozen=True, slots=True)
class ReloadResult:
    sha256: str  # of the file now in force
    loaded_at: float  # epoch seconds
    changed: tuple[str, ...]  # the sections that differed (empty: the file was unchanged)


@dataclass(frozen=True, slots=True)
class _Source:
    path: Path | None  # None: the app was built from a config object, with no file


_SOURCE = web.AppKey("config_source", _Source)


def reload_runtime(runtime: GatewayRuntime, path: Path) -> ReloadResult:
    """Load ``path``, check it changes only ``RELOADABLE`` sections, swap the router in.

    Raises ``ConfigError`` (and counts a rejection) with the old config untouched.
    """
    try:
        raw = _read(path)
        new = load_config(path)
        changed = _changed_sections(runtime.config, new)
        fixed = sorted(set(changed) - RELOADABLE)
        if fixed:
            raise ConfigError(
                str(path),
                fixed[0],
                f"unchanged: only {', '.join(sorted(RELOADABLE))} reloads; "
                f"a change to {', '.join(fixed)} needs a restart",
            )
        router = build_router(new, config_path=path, embedder=runtime.embedder)
    except ConfigError:
        runtime.metrics.config_reloads.inc(("rejected",))
        raise
    runtime.pipeline.replace_router(router)
    runtime.config = new
    loaded_at = time.time()
    runtime.metrics.config_reloads.inc(("ok",))
    runtime.metrics.config_loaded.set(loaded_at)
    return ReloadResult(hashlib.sha256(raw).hexdigest(), loaded_at, tuple(changed))


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(str(path), "<file>", f"a readable file ({exc.strerror})") from None


def _changed_sections(old: GatewayConfig, new: GatewayConfig) -> list[str]:
    before, after = old.model_dump(mode="json"), new.model_dump(mode="json")
    return [name for name in type(old).model_fields if before.get(name) != after.get(name)]


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
