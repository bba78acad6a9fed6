"""A request's shape: its structure without its content, for the circuit breaker.

Two requests have the same shape when they set the same parameters and their messages are of
the same kinds (role, content as a string or as which part types, tool calls, a tool_call_id,
a name), whatever the text, the values or the length of the conversation.  A server that
answered a shape before and now fails it is failing, not being sent something it cannot read
(``breaker.py``).  Stable across processes (blake2b), so tests and replicas agree.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from typing import Any

__all__ = ["request_shape"]

_MESSAGE_FLAGS = ("tool_calls", "tool_call_id", "name", "function_call")


def request_shape(body: Mapping[str, Any]) -> int:
    params = sorted(name for name, value in body.items() if value is not None)
    kinds = sorted({_message_kind(m) for m in body.get("messages") or () if isinstance(m, dict)})
    extra = (
        _kind_of(body.get("response_format")),
        isinstance(body.get("n"), int) and body["n"] > 1,
    )
    return _digest(tuple(params), tuple(kinds), extra)


@functools.lru_cache(maxsize=4096)
def _digest(params: tuple[str, ...], kinds: tuple[str, ...], extra: tuple[Any, ...]) -> int:
    """The shape's hash; few distinct shapes recur, so each is hashed once (a memo of the
    pure function: the hash, not the text, is what costs)."""
    text = repr((list(params), list(kinds), extra)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


def _message_kind(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if type(content) is str and len(message) == 2 and "role" in message:
        return f"{message['role']}:str"  # the common message: no part list, no flag to look for
    if isinstance(content, list):
        parts = sorted({str(p.get("type")) for p in content if isinstance(p, dict)})
        what = "[" + ",".join(parts) + "]"
    else:
        what = type(content).__name__
    flags = "".join(f"+{flag}" for flag in _MESSAGE_FLAGS if message.get(flag) is not None)
    return f"{message.get('role')}:{what}{flags}"


def _kind_of(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else None
    return kind if isinstance(kind, str) else None
