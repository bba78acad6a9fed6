"""``create_app(config)``: the aiohttp application, its routes and its lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from aiohttp import web

from hybrid_gateway.api import routes
from hybrid_gateway.api.error_mapping import http_error_response
from hybrid_gateway.api.runtime import build_runtime
from hybrid_gateway.config import GatewayConfig
from hybrid_gateway.resilience.clock import Clock, MonotonicClock

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _http_errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Unknown paths and wrong methods get OpenAI-style JSON too, never aiohttp's text page."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return http_error_response(exc, request.app[routes.RUNTIME].ids.new())


def create_app(
    config: GatewayConfig,
    *,
    config_path: str | Path | None = None,
    clock: Clock | None = None,
) -> web.Application:
    # The body limit is enforced by the chat handler (to answer in OpenAI's error shape);
    # aiohttp's own limit sits just above it as a backstop.
    app = web.Application(
        client_max_size=config.server.max_body_bytes + 1, middlewares=[_http_errors_as_json]
    )

    async def lifespan(app: web.Application) -> AsyncIterator[None]:
        runtime = build_runtime(config, config_path=config_path, clock=clock or MonotonicClock())
        app[routes.RUNTIME] = runtime
        yield
        await runtime.aclose()

    app.cleanup_ctx.append(lifespan)
    app.router.add_post("/v1/chat/completions", routes.chat_completions)
    app.router.add_get("/v1/models", routes.list_models)
    app.router.add_get("/v1/models/{model_id}", routes.get_model)
    app.router.add_get("/healthz", routes.healthz)
    app.router.add_get("/metrics", routes.metrics)
    return app
