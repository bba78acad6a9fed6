"""Which HTTP 500 answers are a server's own validation errors (the request's fault).

Some servers answer a malformed request with 500 instead of 400: llama-cpp-python turns the
Python exception its chat formatting raised into ``{"error": {"message": str(exc), "type":
"internal_server_error"}}`` (a list of text parts gives "can only concatenate str (not "list")
to str"; a message without a field its template reads gives the field's name in quotes, from a
``KeyError``; a body its request model refuses, such as a tool message without
``tool_call_id`` or an assistant message with ``content: null``, gives "N validation
errors: ..."), llama.cpp's own server sends "Failed to parse messages: ..." or an
``[json.exception...]`` text, and a chat template's ``raise_exception`` says what it expected
("Conversation roles must alternate user/assistant...").  Such an answer says nothing about
the server's health, so it is relayed as a 400 (``upstream_rejected_request``), not retried,
and not counted by the circuit breaker.

Matched on the error's message only, never on free text: a 500 whose body is not an error
object (an HTML page from a proxy, say) is a server failure.  Out-of-memory, CUDA and decode
errors match none of the shapes below.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import orjson

__all__ = ["SHAPES", "validation_error"]

# name -> message pattern; the name documents the shape (see the docstring).
SHAPES: Mapping[str, re.Pattern[str]] = {
    "llama.cpp json exception": re.compile(r"\[json\.exception\.[a-z_]+\.\d+\]"),
    "llama.cpp parse failure": re.compile(r"^(Failed to parse|Invalid|Missing|Unsupported)\b"),
    "python type error on content": re.compile(
        r"can only concatenate str|must be (str|a string|list|dict|int)\b|"
        r"expected (str|string|list|dict) instance|is not subscriptable|"
        r"object is not iterable|unhashable type"
    ),
    "python missing field (KeyError)": re.compile(r"^'[A-Za-z_][A-Za-z0-9_]*'$"),
    # pydantic: "1 validation error for Model"; llama-cpp-python 0.3 re-raises FastAPI's
    # request validation as a 500 "6 validation errors:\n  {'type': 'literal_error', ...}"
    "pydantic validation error": re.compile(r"^\d+ validation errors?( for \w+|:)"),
    "chat template raise_exception": re.compile(
        r"(?i)conversation roles must alternate|only user and assistant roles|"
        r"jinja2?\.exceptions|TemplateError"
    ),
}


def validation_error(raw: bytes) -> str | None:
    """The shape a 500 body matches (it is a validation error), or None."""
    message = _message(raw)
    if message is None:
        return None
    for name, pattern in SHAPES.items():
        if pattern.search(message):
            return name
    return None


def _message(raw: bytes) -> str | None:
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    if isinstance(parsed, dict) and error is None:
        error = parsed.get("detail")  # FastAPI's own error shape
    return error.strip() if isinstance(error, str) else None
