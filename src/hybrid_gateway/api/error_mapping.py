"""The only place exceptions become HTTP: OpenAI-style error JSON with the request id.

    {"error": {"message": ..., "type": ..., "param": ..., "code": ..., "request_id": ...}}

Anything that is not a ``GatewayError`` is a bug: the client gets a 500 with the request id and
no traceback, and the traceback goes to the server log under the same id.
"""

from __future__ import annotations

import logging
import math

import orjson
from aiohttp import web

from hybrid_gateway.errors import GatewayError, Overloaded

log = logging.getLogger("hybrid_gateway.api")


def error_payload(
    message: str, *, type_: str, code: str | None, param: str | None, request_id: str
) -> dict[str, dict[str, str | None]]:
    return {
        "error": {
            "message": message,
            "type": type_,
            "param": param,
            "code": code,
            "request_id": request_id,
        }
    }


def gateway_error_payload(exc: GatewayError, request_id: str) -> dict[str, dict[str, str | None]]:
    return error_payload(
        exc.message, type_=exc.type, code=exc.code, param=exc.param, request_id=request_id
    )


def error_response(
    exc: BaseException, request_id: str, headers: dict[str, str] | None = None
) -> web.Response:
    out = dict(headers or {})
    out["x-request-id"] = request_id
    if isinstance(exc, web.HTTPException):  # aiohttp's own, e.g. 413 from request.read()
        response = http_error_response(exc, request_id)
        response.headers.update(out)
        return response
    if isinstance(exc, GatewayError):
        status = exc.status
        payload = gateway_error_payload(exc, request_id)
        if isinstance(exc, Overloaded):
            out["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
    else:
        log.exception("unhandled error in request %s", request_id, exc_info=exc)
        status = 500
        payload = error_payload(
            "The gateway hit an internal error; the request id is in the server log.",
            type_="server_error", code="internal_error", param=None, request_id=request_id,
        )  # fmt: skip
    return web.Response(
        body=orjson.dumps(payload), status=status, headers=out, content_type="application/json"
    )


def http_error_response(exc: web.HTTPException, request_id: str) -> web.Response:
    """aiohttp's own 404/405/413 etc., reshaped as OpenAI errors."""
    codes = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}
    payload = error_payload(
        exc.reason if exc.status != 404 else "No such endpoint on this gateway.",
        type_="invalid_request_error", code=codes.get(exc.status, f"http_{exc.status}"),
        param=None, request_id=request_id,
    )  # fmt: skip
    headers = {"x-request-id": request_id}
    if exc.status == 405 and "Allow" in exc.headers:
        headers["Allow"] = exc.headers["Allow"]
    return web.Response(
        body=orjson.dumps(payload), status=exc.status, headers=headers,
        content_type="application/json",
    )  # fmt: skip
