"""HTTP handlers: parse, hand to the pipeline, shape the answer.  No policy lives here."""

from __future__ import annotations

import asyncio
import math
import time

import orjson
from aiohttp import web

from hybrid_gateway import __version__
from hybrid_gateway.api.error_mapping import error_response, gateway_error_payload
from hybrid_gateway.api.limits import check_message_count
from hybrid_gateway.api.runtime import GatewayRuntime
from hybrid_gateway.api.schema import parse_body, parse_chat_request
from hybrid_gateway.errors import GatewayError, ModelNotFound, PayloadTooLarge
from hybrid_gateway.observability.log_rows import note_category
from hybrid_gateway.types import CacheOutcome, ChatRequest, RequestRecord
from hybrid_gateway.upstreams.sse import frame_json

RUNTIME = web.AppKey("runtime", GatewayRuntime)

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
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raw = b"x" * (limit + 1)
    if len(raw) > limit:
        raise PayloadTooLarge(f"The request body is over this gateway's limit of {limit} bytes.")
    return raw


async def chat_completions(request: web.Request) -> web.StreamResponse:
    runtime = request.app[RUNTIME]
    clock = runtime.clock
    started = clock.now()
    record = RequestRecord(request_id=runtime.ids.new(), started_at=time.time())
    try:
        runtime.tenancy.identify(request.headers.get("Authorization"), record)
        raw = await _read_body(request, runtime.config.server.max_body_bytes)
        chat = parse_chat_request(parse_body(raw))
        check_message_count(chat, runtime.config.server.max_messages)
        record.model, record.stream = chat.model, chat.stream
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
            return await _stream(request, runtime, chat, record, started)
        result = await runtime.pipeline.complete(chat, record)
        response = web.Response(
            body=result.body, status=record.status, content_type="application/json",
            headers=_decision_headers(record),
        )  # fmt: skip
    except GatewayError as exc:
        record.status, record.error_code = exc.status, exc.code
        response = error_response(exc, record.request_id, _decision_headers(record))
    except Exception as exc:  # a bug: answer 500 without a traceback, log it with the id
        record.status, record.error_code = 500, "internal_error"
        response = error_response(exc, record.request_id, _decision_headers(record))
    record.latency_ms = (clock.now() - started) * 1000
    runtime.record_done(record)
    return response


async def _stream(
    request: web.Request,
    runtime: GatewayRuntime,
    chat: ChatRequest,
    record: RequestRecord,
    started: float,
) -> web.StreamResponse:
    response: web.StreamResponse | None = None
    failure: tuple[int, str] | None = None
    async with runtime.pipeline.stream(chat, record) as events:
        cost_known = record.cache in (CacheOutcome.EXACT, CacheOutcome.SEMANTIC)
        response = web.StreamResponse(
            status=record.status,  # 200, or 503 for a shed answer when so configured
            headers={**_SSE_HEADERS, **_decision_headers(record, cost_known=cost_known)},
        )
        await response.prepare(request)
        try:
            async for event in events:
                await response.write(event)
        except GatewayError as exc:
            # Bytes are already on the wire: the failure travels as an SSE error event.
            failure = exc.status, exc.code
            await response.write(frame_json(gateway_error_payload(exc, record.request_id)))
        except (ConnectionResetError, ConnectionError):
            # The client went away: leaving this block closes the upstream request too.
            failure = 499, "client_closed_request"
    # set once the pipeline has closed the stream (and billed what was generated)
    if failure is not None:
        record.status, record.error_code = failure
    record.latency_ms = (runtime.clock.now() - started) * 1000
    runtime.record_done(record)
    if record.status != 499:
        await response.write_eof()
    return response


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
    up = store["up"] and records["up"] and (vectors is None or vectors["up"])
    body = {
        # degraded: serving, but a shared store is down (outage policies apply; stores/)
        "status": "ok" if up else "degraded",
        "version": __version__,
        "uptime_s": round(time.time() - runtime.started_at, 3),
        "channels": sorted(runtime.channels),
        "store": store,
        "records": records,
    }
    if vectors is not None:
        body["semantic_store"] = vectors
    return web.json_response(body, dumps=_dumps)


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
