"""HTTP handlers: parse, hand to the pipeline, shape the answer.  No policy lives here."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator

import orjson
from aiohttp import web

from hybrid_gateway.api.error_mapping import error_response, gateway_error_payload
from hybrid_gateway.api.health import Phase, channel_problems, health_body, readiness_response
from hybrid_gateway.api.limits import check_message_count
from hybrid_gateway.api.runtime import GatewayRuntime
from hybrid_gateway.api.schema import parse_body, parse_chat_request
from hybrid_gateway.embedding.lazy import attach_client_check
from hybrid_gateway.errors import GatewayError, ModelNotFound, Overloaded, PayloadTooLarge
from hybrid_gateway.observability.log_rows import note_category
from hybrid_gateway.observability.logs import bind_request_id, unbind_request_id
from hybrid_gateway.types import CacheOutcome, ChatRequest, RequestRecord
from hybrid_gateway.upstreams.pool.context import REQUEST_HEADERS
from hybrid_gateway.upstreams.pool.report import endpoint_report
from hybrid_gateway.upstreams.sse import frame_json

RUNTIME = web.AppKey("runtime", GatewayRuntime)
# error code of a request the SIGTERM drain cancelled (503; logged with it)
SHUTTING_DOWN = "shutting_down"

_SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # tell nginx-style proxies in front of us not to buffer
}


def _decision_headers(record: RequestRecord, *, cost_known: bool = True) -> dict[str, str]:
    headers = {
        "x-request-id": record.request_id,
        "x-gateway-route": record.route.header() if record.route else "none",
        "x-gateway-cache": record.cache.value,
        # A stream's cost is known only at its end: it arrives as the SSE comment
        # ": x-gateway-cost-usd=..." before [DONE], and in the request log.
        "x-gateway-cost-usd": f"{record.cost_usd:.8f}" if cost_known else "pending",
        "x-gateway-retries": str(record.retries),
    }
    breaker = record.extra.get("breaker")
    if isinstance(breaker, str):
        headers["x-gateway-breaker"] = breaker
    if record.fallback is not None:
        headers["x-gateway-fallback"] = record.fallback
    if isinstance(upstream_model := record.extra.get("upstream_model"), str):
        headers["x-gateway-upstream-model"] = upstream_model  # upstreams/answers.py
    if record.cache is CacheOutcome.SEMANTIC and record.similarity is not None:
        # which stored question answered, how close it was, and the checks it passed
        headers["x-gateway-cache-similarity"] = f"{record.similarity:.4f}"
        headers["x-gateway-cache-entry"] = str(record.extra.get("cache_entry", ""))
        headers["x-gateway-cache-checks"] = str(record.extra.get("cache_checks", ""))
    elif isinstance(checks := record.extra.get("cache_checks"), str):
        # no hit, and why: the checks a near candidate failed (threshold,!negation) or why
        # the caches were skipped (uncacheable, logprobs, store_down)
        headers["x-gateway-cache-checks"] = checks
    result_url = record.extra.get("result_url")  # a deadline fallback: the late answer's URL
    if isinstance(result_url, str):
        headers["x-gateway-result-url"] = result_url
    retry_after = record.extra.get("retry_after_s")  # a shed answer sent as 503
    if isinstance(retry_after, float):
        headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
    return headers


async def _read_body(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(
            f"The request body is {request.content_length} bytes; this gateway accepts at most "
            f"{limit} bytes."
        )
    payload = request.content
    try:
        # A body that came in with its headers (most chat requests) is all buffered already:
        # taken at once, without read()'s loop of awaits (its limit is checked just below).
        raw = payload.read_nowait() if payload.is_eof() else await request.read()
    except web.HTTPRequestEntityTooLarge:
        raw = b"x" * (limit + 1)
    if len(raw) > limit:
        raise PayloadTooLarge(f"The request body is over this gateway's limit of {limit} bytes.")
    return raw


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def chat_completions(request: web.Request) -> web.StreamResponse:
    runtime = request.app[RUNTIME]
    record = RequestRecord(request_id=runtime.ids.new(), started_at=time.time())
    # an embedding job of a client that hung up is dropped, not computed (embedding/lazy.py)
    attach_client_check(record, lambda: not _gone(request))
    done = _Done(runtime, record)
    token = bind_request_id(record.request_id)  # every line logged for it carries the id
    task = runtime.inflight.enter()
    try:
        return await _answer(request, runtime, record, done)
    finally:
        runtime.inflight.leave(task)
        unbind_request_id(token)


async def _answer(
    request: web.Request, runtime: GatewayRuntime, record: RequestRecord, done: _Done
) -> web.StreamResponse:
    try:
        runtime.tenancy.identify(request.headers.get("Authorization"), record)
        raw = await _read_body(request, runtime.config.server.max_body_bytes)
        chat = parse_chat_request(parse_body(raw))
        check_message_count(chat, runtime.config.server.max_messages)
        record.model, record.stream = chat.model, chat.stream
        record.extra[REQUEST_HEADERS] = request.headers  # balancing.session_header (pool/)
        if runtime.request_log is not None:  # server.request_log.prompts
            runtime.request_log.note_prompt(chat.messages, record)
            note_category(chat.body.get("metadata"), runtime.config.routing.category_key, record)
        if chat.model not in runtime.model_ids:
            raise ModelNotFound(
                f"The model '{chat.model}' does not exist on this gateway; "
                f"GET /v1/models lists the ones it serves.",
                param="model",
            )
        # lane permission (403), rate quotas (429)
        if runtime.tenancy.admits_async:
            await runtime.tenancy.admit_async(chat, record)  # stores.backend redis
        else:
            runtime.tenancy.admit(chat, record)
        if chat.stream:
            return await _stream(request, runtime, chat, record, done)
        result = await runtime.pipeline.complete(chat, record)
        response = web.Response(
            body=result.body, status=record.status, content_type="application/json",
            headers=_decision_headers(record),
        )  # fmt: skip
    except GatewayError as exc:
        record.status, record.error_code = exc.status, exc.code
        response = error_response(exc, record.request_id, _decision_headers(record))
    except asyncio.CancelledError:
        if not _shutting_down(runtime):
            done(499, "client_closed_request")
            raise
        shutdown = _shutdown_error()  # cancelled by the drain: still answer, and say why
        record.status, record.error_code = shutdown.status, shutdown.code
        response = error_response(shutdown, record.request_id, _decision_headers(record))
    except Exception as exc:  # a bug: answer 500 without a traceback, log it with the id
        record.status, record.error_code = 500, "internal_error"
        response = error_response(exc, record.request_id, _decision_headers(record))
    done()
    if runtime.lifecycle.phase is Phase.DRAINING:
        response.force_close()  # no more requests on this connection
    return response


class _Done:
    """Logs and counts the request once, with its latency, whichever way it ends."""

    __slots__ = ("_logged", "_record", "_runtime", "_started")

    def __init__(self, runtime: GatewayRuntime, record: RequestRecord) -> None:
        self._runtime, self._record = runtime, record
        self._started = runtime.clock.now()
        self._logged = False

    def __call__(self, status: int | None = None, code: str | None = None) -> None:
        if self._logged:
            return
        self._logged = True
        record = self._record
        if status is not None:
            record.status, record.error_code = status, code
        record.latency_ms = (self._runtime.clock.now() - self._started) * 1000
        self._runtime.record_done(record)


def _shutting_down(runtime: GatewayRuntime) -> bool:
    """Cancelled by the drain (api/drain.py): take the cancellation back to answer 503."""
    task = asyncio.current_task()
    if runtime.lifecycle.phase is not Phase.DRAINING or task is None:
        return False
    task.uncancel()
    return True


def _shutdown_error() -> Overloaded:
    return Overloaded(
        "The gateway is shutting down and cancelled this request; retry it.",
        retry_after_s=1.0, code=SHUTTING_DOWN,
    )  # fmt: skip


async def _stream(
    request: web.Request,
    runtime: GatewayRuntime,
    chat: ChatRequest,
    record: RequestRecord,
    done: _Done,
) -> web.StreamResponse:
    response: web.StreamResponse | None = None
    failure: tuple[int, str] | None = None
    try:
        async with runtime.pipeline.stream(chat, record) as events:
            cost_known = record.cache in (CacheOutcome.EXACT, CacheOutcome.SEMANTIC)
            response = web.StreamResponse(
                status=record.status,  # 200, or 503 for a shed answer when so configured
                headers={**_SSE_HEADERS, **_decision_headers(record, cost_known=cost_known)},
            )
            failure = await _relay(request, runtime, record, response, events)
    except asyncio.CancelledError:  # while the stream opened or closed
        if not _shutting_down(runtime):
            done(499, "client_closed_request")  # the pipeline has billed what was generated
            raise
        failure = 503, SHUTTING_DOWN
    # set once the pipeline has closed the stream (and billed what was generated)
    done(*(failure or (None, None)))
    if response is None or not response.prepared:
        if record.status == 499:
            return web.Response(status=499)  # nobody reads it: the connection is gone
        return error_response(_shutdown_error(), record.request_id, _decision_headers(record))
    if record.status != 499:
        if runtime.lifecycle.phase is Phase.DRAINING:
            response.force_close()
        await response.write_eof()
    return response


async def _relay(
    request: web.Request,
    runtime: GatewayRuntime,
    record: RequestRecord,
    response: web.StreamResponse,
    events: AsyncIterator[bytes],
) -> tuple[int, str] | None:
    """Send the stream; the failure to log, if any (the status line went out as 200)."""
    try:
        await response.prepare(request)  # a client gone already fails here: 499 as well
        async for event in events:
            await response.write(event)
    except GatewayError as exc:
        # Bytes are already on the wire: the failure travels as an SSE error event.
        await response.write(frame_json(gateway_error_payload(exc, record.request_id)))
        return exc.status, exc.code
    except (ConnectionResetError, ConnectionError):
        # The client went away: leaving the pipeline's block closes the upstream request too.
        return 499, "client_closed_request"
    except asyncio.CancelledError:
        if not _shutting_down(runtime):
            raise
        if response.prepared:  # tell the client why the stream ends here
            payload = gateway_error_payload(_shutdown_error(), record.request_id)
            await response.write(frame_json(payload))
        return 503, SHUTTING_DOWN
    return None


async def list_models(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    try:
        runtime.tenancy.authenticate(request.headers.get("Authorization"))
    except GatewayError as exc:
        return error_response(exc, runtime.ids.new())
    data = [_model_object(m.id, runtime) for m in runtime.config.models]
    return web.json_response({"object": "list", "data": data}, dumps=_dumps)


async def get_model(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    model_id = request.match_info["model_id"]
    try:
        runtime.tenancy.authenticate(request.headers.get("Authorization"))
    except GatewayError as exc:
        return error_response(exc, runtime.ids.new())
    if model_id not in runtime.model_ids:
        rid = runtime.ids.new()
        return error_response(
            ModelNotFound(f"The model '{model_id}' does not exist on this gateway."), rid
        )
    return web.json_response(_model_object(model_id, runtime), dumps=_dumps)


def _model_object(model_id: str, runtime: GatewayRuntime) -> dict[str, object]:
    return {
        "id": model_id,
        "object": "model",
        "created": int(runtime.started_at),
        "owned_by": "hybrid-gateway",
    }


async def healthz(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    store = {"backend": "memory", "up": True} if runtime.shared is None else runtime.shared.status()
    log = runtime.request_log
    records = {"backend": "none", "up": True} if log is None else log.status()
    # records: postgres: the semantic cache's vectors (None while they live in-process)
    vectors = None if runtime.semantic is None else runtime.semantic.store_status()
    channels = sorted(runtime.channels)
    problems = channel_problems(runtime.health, runtime.dispatcher.breaker, channels)
    pools, ejected = endpoint_report(runtime.channels)  # channels with endpoints
    stores = {"store": store, "records": records, "semantic_store": vectors}
    body = health_body(stores, [*problems, *ejected], channels, runtime.started_at)
    if pools:
        body["endpoints"] = pools
    return web.json_response(body, dumps=_dumps)


async def readyz(request: web.Request) -> web.Response:
    """200 while serving; 503 while starting and once a SIGTERM began the drain."""
    runtime = request.app[RUNTIME]
    response = readiness_response(runtime.lifecycle, runtime.ids.new())
    if response.status != 200:
        response.force_close()
    return response


async def metrics(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    if runtime.exact_cache is not None:
        runtime.metrics.cache_entries.set(runtime.exact_cache.entries)
        runtime.metrics.cache_bytes.set(runtime.exact_cache.size_bytes)
    idle = {name: channel.idle_connections for name, channel in runtime.channels.items()}
    runtime.metrics.observe_loop(len(asyncio.all_tasks()), idle)
    runtime.degradation.export(runtime.metrics)
    return web.Response(
        body=runtime.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4"}
    )


def _dumps(obj: object) -> str:
    return orjson.dumps(obj).decode()
