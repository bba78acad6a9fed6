"""``create_app(config)``: the aiohttp application, its routes and its lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from hybrid_gateway.api import dashboard, feedback, reload, results, routes
from hybrid_gateway.api.admin import add_admin_routes
from hybrid_gateway.api.admin_cache import add_admin_cache_routes
from hybrid_gateway.api.limits import edge_middleware, parser_limits
from hybrid_gateway.api.openapi import openapi_json
from hybrid_gateway.api.runtime import build_runtime
from hybrid_gateway.config import GatewayConfig
from hybrid_gateway.resilience.clock import Clock, MonotonicClock


def _new_request_id(request: web.Request) -> str:
    return request.app[routes.RUNTIME].ids.new()


def create_app(
    config: GatewayConfig,
    *,
    config_path: str | Path | None = None,
    clock: Clock | None = None,
) -> web.Application:
    # The body limit is enforced by the chat handler (to answer in OpenAI's error shape);
    # aiohttp's own limit sits just above it as a backstop.  Same for the header limit
    # (api/limits.py), whose middleware also answers aiohttp's own 4xx (an unknown path, a
    # wrong method) in the OpenAI shape.
    edge = edge_middleware(config.server.max_header_bytes, _new_request_id)
    app = web.Application(
        client_max_size=config.server.max_body_bytes + 1,
        middlewares=[edge],
        handler_args=parser_limits(config.server.max_header_bytes),
    )

    async def lifespan(app: web.Application) -> AsyncIterator[None]:
        runtime = build_runtime(config, config_path=config_path, clock=clock or MonotonicClock())
        app[routes.RUNTIME] = runtime
        if runtime.shared is not None:
            runtime.shared.start()  # breaker + budget sync with the shared store
        if runtime.router_update is not None:
            runtime.router_update.start()  # learning.router_update: train, version, follow
        yield
        await runtime.aclose()

    app.cleanup_ctx.append(lifespan)
    app.router.add_post("/v1/chat/completions", routes.chat_completions)
    app.router.add_get("/v1/models", routes.list_models)
    app.router.add_get("/v1/models/{model_id}", routes.get_model)
    app.router.add_get("/healthz", routes.healthz)
    app.router.add_get("/readyz", routes.readyz)
    app.router.add_get("/metrics", routes.metrics)
    app.router.add_get("/openapi.json", openapi_json)
    feedback.mount(app)
    dashboard.mount(app)
    add_admin_routes(app)
    add_admin_cache_routes(app)  # /admin/cache/semantic/...
    results.mount(app)  # GET /v1/gateway/results/{request_id}
    reload.mount(app, config_path)  # POST /admin/reload
    return app
