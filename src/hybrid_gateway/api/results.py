"""``GET /v1/gateway/results/{request_id}``: the late answer of a deadline fallback.

    202  {"object": "gateway.deferred_result", "id": ..., "status": "pending"}
    200  the slow lane's chat.completion, as it would have been answered (``x-gateway-deferred:
         done``); a streamed request's answer comes back assembled into one chat.completion
    4xx/5xx  the slow lane's own error, OpenAI-shaped, when it failed (``deferred_cancelled``
         503 when the gateway shut down first)
    404  ``request_not_found``: no such id, expired, or another tenant's request (the same
         answer in all three cases, so ids cannot be probed across tenants)
    503  ``store_unavailable`` (``Retry-After``): replicas share results through Redis, it is
         down, and this replica did not run the request

The caller is identified exactly as for chat requests (``Authorization``; the default tenant
while auth is off).
"""

from __future__ import annotations

from aiohttp import web

from hybrid_gateway.api.error_mapping import error_payload, error_response
from hybrid_gateway.api.routes import RUNTIME
from hybrid_gateway.errors import GatewayError, RequestNotFound
from hybrid_gateway.resilience.deadline import RESULTS_PATH
from hybrid_gateway.results.store import ResultState


def mount(app: web.Application) -> None:
    app.router.add_get(RESULTS_PATH + "{request_id}", get_result)


async def get_result(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    call_id = runtime.ids.new()
    request_id = request.match_info["request_id"]
    try:
        tenant = runtime.tenancy.authenticate(request.headers.get("Authorization")).tenant
        entry = await runtime.degradation.results.lookup(request_id, tenant)
        if entry is None:
            raise RequestNotFound(
                f"No deferred result for request '{request_id}' (unknown, expired, or not "
                f"this caller's).",
                param="request_id",
            )
    except GatewayError as exc:
        return error_response(exc, call_id)
    headers = {"x-request-id": request_id, "x-gateway-deferred": entry.state.value}
    if entry.state is ResultState.PENDING:
        body = {"object": "gateway.deferred_result", "id": request_id, "status": "pending"}
        return web.json_response(body, status=202, headers=headers)
    if entry.state is ResultState.DONE:
        return web.Response(body=entry.body, content_type="application/json", headers=headers)
    payload = error_payload(
        entry.error_message or "the slow lane failed", type_="upstream_error",
        code=entry.error_code, param=None, request_id=request_id,
    )  # fmt: skip
    return web.json_response(payload, status=entry.status, headers=headers)
