"""Request size limits besides the body's: header bytes and message count.

Both bound what one request can make the gateway hold or hash.  The body limit
(``server.max_body_bytes``) already caps the bytes of a chat request, but not how many
messages they hold: ten thousand one-character messages fit in a few hundred KiB and cost a
routing, cache-key and token-estimate pass each.  Headers are parsed before any handler runs,
so aiohttp's parser has its own per-line limits; ``parser_limits`` raises those a little above
``server.max_header_bytes`` so that the middleware here sees the request and answers in the
OpenAI error shape (431 with a request id) instead of aiohttp's plain-text 400.  Only a
single header line past twice the limit still meets aiohttp's own refusal, as a backstop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from hybrid_gateway.api.error_mapping import error_response, http_error_response
from hybrid_gateway.errors import HeadersTooLarge, InvalidRequest
from hybrid_gateway.types import ChatRequest

__all__ = ["check_message_count", "edge_middleware", "header_bytes", "parser_limits"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# aiohttp's default for one header line; the parser never gets a lower limit than this.
_AIOHTTP_LINE = 8190


def parser_limits(max_header_bytes: int) -> dict[str, Any]:
    """``handler_args`` for aiohttp: let header lines up to twice the limit reach us."""
    line = max(_AIOHTTP_LINE, 2 * max_header_bytes)
    return {"max_field_size": line, "max_line_size": line}


def header_bytes(request: web.Request) -> int:
    """Names and values of every header, with the ``: `` and CRLF of each line."""
    return sum(len(name) + len(value) + 4 for name, value in request.raw_headers)


def edge_middleware(max_bytes: int, new_request_id: Callable[[web.Request], str]) -> Middleware:
    """The gateway's one middleware: 431 ``request_header_fields_too_large`` above
    ``max_bytes``; then aiohttp's own 4xx (an unknown path, a wrong method) answered in the
    OpenAI shape, never as aiohttp's text page.  One layer, not two: each costs every request."""

    @web.middleware
    async def limit(request: web.Request, handler: Handler) -> web.StreamResponse:
        size = header_bytes(request)
        if size > max_bytes:
            exc = HeadersTooLarge(
                f"The request headers are {size} bytes; this gateway accepts at most "
                f"{max_bytes} bytes of headers."
            )
            return error_response(exc, new_request_id(request))
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return http_error_response(exc, new_request_id(request))

    return limit


def check_message_count(chat: ChatRequest, limit: int) -> None:
    """400 ``array_above_max_length`` (OpenAI's code for an over-long array) above ``limit``."""
    count = len(chat.messages)
    if count > limit:
        raise InvalidRequest(
            f"Invalid 'messages': array too long. Expected an array with maximum length "
            f"{limit}, but got an array with length {count} instead.",
            param="messages",
            code="array_above_max_length",
        )
