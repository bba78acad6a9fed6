"""The floor for `bench overhead`: a proxy that only relays, in a few lines of aiohttp.

    python -m hybrid_gateway.tools.overhead.bare_proxy --upstream http://127.0.0.1:8001 --port 0

prints ``bare proxy listening on http://HOST:PORT`` once bound.  ``--upstream`` is an origin
(scheme, host, port): the request path is relayed unchanged, so ``POST /v1/chat/completions``
goes to ``UPSTREAM/v1/chat/completions``.  One pooled keep-alive ``ClientSession``, no access
log, uvloop when it is importable: the same server stack and loop as the gateway, minus
everything the gateway does on top.  It stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import AsyncIterator, Coroutine, Sequence
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

__all__ = ["build_app", "loop_name", "main", "serve"]

_RELAYED_RESPONSE_HEADERS = ("Content-Type",)
_SESSION = web.AppKey("session", aiohttp.ClientSession)


def build_app(upstream: str) -> web.Application:
    """An app that relays every POST to ``upstream`` + the same path."""
    origin = upstream.rstrip("/")
    if URL(origin).path not in ("", "/"):
        raise ValueError(f"--upstream must be an origin without a path: {upstream!r}")
    app = web.Application()

    async def session_ctx(app: web.Application) -> AsyncIterator[None]:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
        async with aiohttp.ClientSession(connector=connector) as session:
            app[_SESSION] = session
            yield

    async def relay(request: web.Request) -> web.Response:
        session = request.app[_SESSION]
        body = await request.read()
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        async with session.post(origin + request.path_qs, data=body, headers=headers) as up:
            payload = await up.read()
            out = {h: up.headers[h] for h in _RELAYED_RESPONSE_HEADERS if h in up.headers}
            return web.Response(body=payload, status=up.status, headers=out)

    app.cleanup_ctx.append(session_ctx)
    app.router.add_post("/{tail:.*}", relay)
    return app


async def serve(upstream: str, host: str, port: int) -> None:
    """Bind, print the listening line, relay until SIGTERM/SIGINT."""
    runner = web.AppRunner(build_app(upstream), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, backlog=1024)
        await site.start()
        bound_host, bound_port = runner.addresses[0][:2]
        print(f"bare proxy listening on http://{bound_host}:{bound_port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


def loop_name() -> str:
    """Which event loop ``run_with_best_loop`` picks here."""
    try:
        import uvloop
    except ImportError:
        return f"asyncio ({sys.version_info.major}.{sys.version_info.minor})"
    version: str = getattr(uvloop, "__version__", "?")
    return f"uvloop {version}"


def run_with_best_loop(coro: Coroutine[Any, Any, None]) -> None:
    """``uvloop.run`` when uvloop is importable, like the gateway; else ``asyncio.run``."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
        return
    uvloop.run(coro)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bare_proxy", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--upstream", required=True, help="origin to relay to, e.g. http://127.0.0.1:8001"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args(argv)
    run_with_best_loop(serve(args.upstream, args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
