"""``POST /v1/feedback`` and ``GET /v1/feedback/{request_id}``: rate an answer, read it back.

Only the tenant that made a request may rate it or read its rating; for anyone else the
request id does not exist (404, the same answer as for an id never issued), so ids cannot be
probed across tenants.  The store is built in this module's own startup step, after the
runtime's (``mount`` appends it to the app's cleanup context), from the runtime's request log:
feedback lives in the same database (the SQLite file, or the shared PostgreSQL).  A gateway
without a request log has nothing to rate.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from aiohttp import web

from hybrid_gateway.api.error_mapping import error_response
from hybrid_gateway.api.routes import RUNTIME
from hybrid_gateway.api.schema import parse_body
from hybrid_gateway.errors import PayloadTooLarge, RequestNotFound
from hybrid_gateway.feedback import FeedbackStore, parse_feedback
from hybrid_gateway.feedback.model import RequestRef

FEEDBACK_STORE = web.AppKey("feedback_store", FeedbackStore)

# A full comment (MAX_COMMENT_CHARS) escaped as \uXXXX plus the other fields fits with room.
MAX_BODY_BYTES = 16 * 1024


def mount(app: web.Application) -> None:
    """Add the feedback routes and the startup step that opens the store."""
    app.cleanup_ctx.append(_lifespan)
    app.router.add_post("/v1/feedback", post_feedback)
    app.router.add_get("/v1/feedback/{request_id}", get_feedback)


async def _lifespan(app: web.Application) -> AsyncIterator[None]:
    log = app[RUNTIME].request_log
    if log is None:
        yield
        return
    store = log.open_feedback()  # in the log's database: SQLite file or shared PostgreSQL
    app[FEEDBACK_STORE] = store
    yield
    await store.aclose()


def caller_tenant(request: web.Request) -> str:
    """The tenant of the caller's API key, as for chat requests (``default`` while auth is off);
    a missing or bad key raises 401."""
    tenancy = request.app[RUNTIME].tenancy
    return tenancy.authenticate(request.headers.get("Authorization")).tenant


async def post_feedback(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    call_id = runtime.ids.new()
    try:
        tenant = caller_tenant(request)
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            raise PayloadTooLarge(f"A feedback body is at most {MAX_BODY_BYTES} bytes.")
        raw = await request.read()
        if len(raw) > MAX_BODY_BYTES:
            raise PayloadTooLarge(f"A feedback body is at most {MAX_BODY_BYTES} bytes.")
        entry = parse_feedback(parse_body(raw))
        store, ref = await _owned_request(request, tenant, entry.request_id)
        saved = await store.save(tenant, entry, time.time())
    except Exception as exc:  # GatewayError: its status; anything else: 500, logged with the id
        return error_response(exc, call_id)
    reason = saved.reason.value if saved.reason else "none"
    runtime.metrics.feedback_received(ref.lane or "none", ref.cache, saved.rating.value, reason)
    return web.json_response(saved.as_json(ref), headers={"x-request-id": call_id})


async def get_feedback(request: web.Request) -> web.Response:
    call_id = request.app[RUNTIME].ids.new()
    request_id = request.match_info["request_id"]
    try:
        tenant = caller_tenant(request)
        store, ref = await _owned_request(request, tenant, request_id)
        saved = await store.get(request_id)
        if saved is None or saved.tenant != tenant:
            raise RequestNotFound(
                f"No feedback has been given for request '{request_id}'.",
                param="request_id", code="feedback_not_found",
            )  # fmt: skip
    except Exception as exc:  # GatewayError: its status; anything else: 500, logged with the id
        return error_response(exc, call_id)
    return web.json_response(saved.as_json(ref), headers={"x-request-id": call_id})


async def _owned_request(
    request: web.Request, tenant: str, request_id: str
) -> tuple[FeedbackStore, RequestRef]:
    store = request.app.get(FEEDBACK_STORE)
    if store is None:
        raise RequestNotFound(
            "This gateway keeps no request log (server.request_log.enabled is false), so there "
            "is no request to give feedback on.",
            param="request_id",
        )
    ref = await store.find_request(request_id)
    if ref is None or ref.tenant != tenant:
        raise RequestNotFound(
            f"No request '{request_id}' was made by this caller; use the x-request-id header "
            "of an answer you received.",
            param="request_id",
        )
    return store, ref
