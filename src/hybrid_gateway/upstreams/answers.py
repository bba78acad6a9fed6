"""An upstream's answer as the client gets it: the model id it asked for, and as many choices.

The ``model`` of an answer is the id the client sent (``auto``, ``light``, ...), not the
upstream's name for its model (llama.cpp reports a GGUF file path); that name is kept on the
record (``UPSTREAM_MODEL``), sent as ``x-gateway-upstream-model`` and logged in the request
log's ``upstream_model`` column.
"""

from __future__ import annotations

from typing import Any

import orjson

from hybrid_gateway.types import ChatRequest, RequestRecord

__all__ = ["UPSTREAM_MODEL", "as_client_model", "asked_choices", "empty_value"]

UPSTREAM_MODEL = "upstream_model"  # record.extra key


def empty_value(value: object) -> bool:
    """A field of an answer, a chunk or a delta that says nothing: null, false, 0, or an empty
    string, array or object (``"refusal": null``, ``"annotations": []``, ``"prefix": false``).
    The cache's replay and the pool's stream resuming both pass over such fields."""
    return (
        value is None
        or value is False
        or value == 0
        or (isinstance(value, str | list | dict) and not value)
    )


def as_client_model(raw: bytes, parsed: dict[str, Any], model: str, record: RequestRecord) -> bytes:
    """``raw`` with ``model`` as its model id (``parsed`` is changed to match)."""
    upstream = parsed.get("model")
    if upstream == model or upstream is None:
        return raw
    record.extra[UPSTREAM_MODEL] = str(upstream)
    parsed["model"] = model
    return orjson.dumps(parsed)


def asked_choices(request: ChatRequest) -> int:
    """The number of choices the request asked for (``n``, 1 when not set)."""
    n = request.body.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
