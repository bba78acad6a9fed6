"""Security review, size limits: body, headers and message count, each refused OpenAI-style.

The security stack runs with ``server.max_body_bytes: 65536``, ``max_header_bytes: 8192`` and
``max_messages: 64`` (``security_stack.LIMITS``).  Each limit is checked on both sides of its
edge against the real gateway: at the limit served, past it refused with the documented
status and code and the request id, before anything reaches the upstream.
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import urlsplit

import orjson

from hybrid_gateway.config import ServerConfig
from tests.hardening.security_stack import LIMITS, Secure, call, is_openai_error, unique


def _body(messages: int, **extra: Any) -> dict[str, Any]:
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"}
             for i in range(messages - 1)]  # fmt: skip
    return {"model": "light", "messages": [*turns, {"role": "user", "content": "last"}],
            **unique(), **extra}  # fmt: skip


def _post(secure: Secure, body: Any = None, **kw: Any) -> Any:
    return call(secure.url + "/v1/chat/completions", "POST", body, token=secure.keys["acme"], **kw)


def test_the_defaults_are_set() -> None:
    server = ServerConfig()
    assert (server.max_body_bytes, server.max_header_bytes, server.max_messages) == (
        1024 * 1024, 32 * 1024, 2048,
    )  # fmt: skip


def test_message_count_limit(secure: Secure) -> None:
    mark = len(secure.upstream.snapshot())
    assert _post(secure, _body(LIMITS["max_messages"])).status == 200
    over = _post(secure, _body(LIMITS["max_messages"] + 1))
    assert is_openai_error(over, 400, "array_above_max_length"), over.body
    assert over.json()["error"]["param"] == "messages"
    assert len(secure.upstream.snapshot()) == mark + 1  # the refused one never went upstream


def test_body_size_limit(secure: Secure) -> None:
    limit = LIMITS["max_body_bytes"]
    padding = {"role": "user", "content": ""}
    body = _body(1)
    body["messages"].insert(0, padding)
    base = len(_serialised(body))
    padding["content"] = "x" * (limit - base)
    assert len(_serialised(body)) == limit
    assert _post(secure, raw=_serialised(body)).status == 200
    padding["content"] += "x"
    over = _post(secure, raw=_serialised(body))
    assert is_openai_error(over, 413, "request_too_large"), over.body
    # Without a Content-Length (chunked), the limit holds as the body is read.
    assert _chunked_status(secure, _serialised(body)) == 413


def _serialised(body: dict[str, Any]) -> bytes:
    return orjson.dumps(body)


def _chunked_status(secure: Secure, data: bytes) -> int:
    where = urlsplit(secure.url)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {where.netloc}\r\n"
        f"Authorization: Bearer {secure.keys['acme']}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    ).encode()
    parts = [data[i : i + 8192] for i in range(0, len(data), 8192)]
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts)
    with socket.create_connection((where.hostname, where.port), timeout=30) as sock:
        sock.sendall(head + chunks + b"0\r\n\r\n")
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return int(reply.split(b" ", 2)[1])


def test_header_size_limit(secure: Secure) -> None:
    mark = len(secure.upstream.snapshot())
    # One large header, then the same bytes spread over several: the limit is on the total.
    for headers in ({"X-Big": "x" * 8000}, {f"X-Part-{i}": "x" * 1000 for i in range(8)}):
        over = chat_with_headers(secure, headers)
        assert is_openai_error(over, 431, "request_header_fields_too_large"), over.body
    assert chat_with_headers(secure, {"X-Fits": "x" * 6000}).status == 200
    assert len(secure.upstream.snapshot()) == mark + 1
    # Every endpoint, not only chat.
    assert call(secure.url + "/healthz", headers={"X-Big": "x" * 9000}).status == 431
    # A single line far past the limit meets aiohttp's own parser limit first: still a 4xx.
    assert call(secure.url + "/healthz", headers={"X-Huge": "x" * 40_000}).status in (400, 431)


def chat_with_headers(secure: Secure, headers: dict[str, str]) -> Any:
    return _post(secure, _body(1), headers=headers)
