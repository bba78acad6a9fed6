"""Run an aiohttp app until SIGINT/SIGTERM: shared by `serve` (the gateway) and `emulate`.

Both print exactly one line once bound, ``<name> listening on http://HOST:PORT`` (with the real
port when asked for port 0), which tests, the demo and the benchmarks wait for.  uvloop is used
when it is importable.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from aiohttp import web

__all__ = ["ListenError", "os_reason", "run_with_best_loop", "serve_until_signalled"]


class ListenError(Exception):
    """The address could not be bound (in use, not local, not allowed): one line for the CLI."""


def os_reason(exc: OSError) -> str:
    """``Address already in use``: the errno's text (asyncio wraps it in a longer message)."""
    return os.strerror(exc.errno) if exc.errno else str(exc)


def run_with_best_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on uvloop when it is importable, else on the default asyncio loop."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    with contextlib.suppress(ImportError):
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)


async def serve_until_signalled(
    runner: web.AppRunner,
    host: str,
    port: int,
    name: str,
    on_started: Callable[[], None] | None = None,
    reuse_port: bool = False,
    on_stop: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Set up ``runner``, bind, announce, wait for SIGINT/SIGTERM, then clean up.

    ``reuse_port``: bind with SO_REUSEPORT, to share the port with sibling workers.
    ``on_stop``: run after the signal, before the cleanup (the gateway drains there).
    A failure to bind raises ``ListenError``.
    """
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, backlog=1024, reuse_port=reuse_port or None)
        try:
            await site.start()
        except OSError as exc:
            raise ListenError(f"cannot listen on {host}:{port}: {os_reason(exc)}") from None
        bound_host, bound_port = _bound(runner, host, port)
        if on_started is not None:
            on_started()
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        print(f"{name} listening on http://{shown}:{bound_port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError, RuntimeError):
                loop.remove_signal_handler(sig)
        if on_stop is not None:
            await on_stop()
    finally:
        await runner.cleanup()


def _bound(runner: web.AppRunner, host: str, port: int) -> tuple[str, int]:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return str(address[0]), int(address[1])
    return host, port
