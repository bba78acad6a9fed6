"""``GET /dashboard``: the built-in live page, its static files and its JSON feed.

The page is three package files (``dashboard/static``) with no external assets, so it works on
a machine with no internet access; a Content-Security-Policy of ``'self'`` keeps it that way.
Its script polls ``/dashboard/data.json``, a snapshot computed from the metrics registry
(``dashboard/snapshot.py``), so the page and ``/metrics`` report the same counters.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from importlib import resources

import orjson
from aiohttp import web

from hybrid_gateway.api.routes import RUNTIME
from hybrid_gateway.dashboard import take_snapshot

_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:",
    "X-Content-Type-Options": "nosniff",
}


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    content_type: str


ASSETS: web.AppKey[dict[str, Asset]] = web.AppKey("dashboard_assets")


def load_assets() -> dict[str, Asset]:
    """The page's files, read once when the app is built (package data, not the network)."""
    folder = resources.files("hybrid_gateway.dashboard").joinpath("static")
    assets: dict[str, Asset] = {}
    for entry in folder.iterdir():
        suffix = entry.name[entry.name.rfind(".") :]
        if entry.is_file() and suffix in _TYPES:
            assets[entry.name] = Asset(entry.read_bytes(), _TYPES[suffix])
    return assets


def mount(app: web.Application) -> None:
    app[ASSETS] = load_assets()
    app.router.add_get("/dashboard", page)
    app.router.add_get("/dashboard/data.json", data)
    app.router.add_get("/dashboard/static/{name}", static)


async def page(request: web.Request) -> web.Response:
    return _asset(request, "index.html")


async def static(request: web.Request) -> web.Response:
    return _asset(request, request.match_info["name"])


async def data(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    snapshot = take_snapshot(runtime.metrics, uptime_s=time.time() - runtime.started_at)
    return web.Response(
        body=orjson.dumps(snapshot.as_json()),
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def _asset(request: web.Request, name: str) -> web.Response:
    asset = request.app[ASSETS].get(name)
    if asset is None:
        raise web.HTTPNotFound()
    return web.Response(body=asset.body, content_type=asset.content_type, headers=_HEADERS)
