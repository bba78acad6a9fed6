"""`hybrid-gateway serve --config gateway.yaml`: run the gateway until SIGINT/SIGTERM.

On a signal the listening socket closes, in-flight requests get ``--grace-s`` seconds to finish,
then the request log is flushed and the upstream pools are closed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import signal
import sys

from aiohttp import web

from hybrid_gateway.api.app import create_app
from hybrid_gateway.config import GatewayConfig, load_config
from hybrid_gateway.errors import ConfigError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="the gateway's YAML config file")
    parser.add_argument("--host", help="override server.host")
    parser.add_argument("--port", type=int, help="override server.port (0 = any free port)")
    parser.add_argument("--grace-s", type=float, default=10.0, help="shutdown grace period")
    parser.add_argument("--log-level", default="WARNING", help="Python logging level")


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    host = args.host or config.server.host
    port = config.server.port if args.port is None else args.port
    _install_fast_loop()
    try:
        asyncio.run(_serve(config, args.config, host, port, args.grace_s))
    except ConfigError as exc:  # raised while building the runtime (e.g. a missing API key env)
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    return 0


def _install_fast_loop() -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


async def _serve(config: GatewayConfig, path: str, host: str, port: int, grace_s: float) -> None:
    app = create_app(config, config_path=path)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=grace_s)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    # Everything built so far lives as long as the process: keep it out of the cyclic GC's
    # scans, which otherwise revisit it on every full collection under load.  And collect the
    # young generation every 20,000 allocations instead of 700: a request allocates hundreds of
    # short-lived objects, almost all freed by reference counting anyway.  Measured with
    # `bench overhead` at concurrency 20: ~230 -> ~207 us of gateway CPU per request.
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)
    bound = runner.addresses[0]
    print(f"gateway listening on http://{bound[0]}:{bound[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
