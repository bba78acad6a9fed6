"""The canonical request key: the same question with the same answer-changing parameters.

What goes in: the namespace (tenant), the model id the client asked for, the messages
(role, content, name, tool calls) and the parameters that change the answer.  What never goes
in: ``user``, ``metadata``, ``stream``/``stream_options``, request ids, timestamps, anything the
client sends that does not change what the model would say.  Parameters set to the OpenAI
default (temperature 1, top_p 1, n 1, penalties 0) are dropped, so "not given" and "given the
default" share one entry.  Numbers are normalised (1 == 1.0, -0.0 == 0.0; integers past 2**53
stay exact), and a content list holding a single text part equals the plain string.

The API refuses bodies nested deeper than ``api/schema.py``'s ``MAX_DEPTH``; a request built
elsewhere past the depth ``orjson`` serialises (255) still gets a key, from an iterative encoding.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from hybrid_gateway.types import ChatRequest

# Parameters that change what the model answers.
ANSWER_PARAMS: frozenset[str] = frozenset(
    {
        "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed",
        "presence_penalty", "frequency_penalty", "logit_bias", "response_format", "tools",
        "tool_choice", "parallel_tool_calls", "n", "logprobs", "top_logprobs",
        "reasoning_effort", "modalities", "audio", "prediction", "functions", "function_call",
        "top_k", "min_p", "repetition_penalty", "verbosity", "web_search_options",
    }
)  # fmt: skip

# Values equal to the API default are the same request as the parameter left out.
_DEFAULTS: Mapping[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "n": 1,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "logprobs": False,
}

# Integers up to 2**53 are exact as floats; larger ones (a seed may be any int64) stay integers,
# or 2**53 and 2**53 + 1 would share a key.
_EXACT = 2**53

_MESSAGE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id", "function_call")


def request_key(request: ChatRequest, namespace: str) -> str:
    """A 32-hex-digit digest identifying the answer this request should get."""
    canonical = [namespace, request.model, _messages(request.messages), _params(request.body)]
    try:
        payload = orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # nested past orjson's recursion limit
        return _deep_digest(canonical)
    return hashlib.blake2b(payload, digest_size=16).hexdigest()


def _deep_digest(value: Any) -> str:
    """The digest of ``value`` walked with an explicit stack, so no depth is too deep.

    Each container is written as its kind and length, then its members (an object's keys
    sorted), so two different values never write the same bytes.  Keys from this path never
    equal keys from ``orjson`` (a value either serialises or it does not)."""
    digest = hashlib.blake2b(digest_size=16, person=b"deep-key")
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            digest.update(b"{%d:" % len(item))
            for name in sorted(item, reverse=True):  # popped back in sorted order
                stack += [item[name], _Key(name)]
        elif isinstance(item, list | tuple):
            digest.update(b"[%d:" % len(item))
            stack.extend(reversed(item))
        elif isinstance(item, _Key):
            digest.update(b"k" + orjson.dumps(item.name))
        else:
            digest.update(b"v" + orjson.dumps(item))
    return digest.hexdigest()


class _Key:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def _messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for message in messages:
        item = {f: message[f] for f in _MESSAGE_FIELDS if message.get(f) is not None}
        content = item.get("content")
        if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict):
            part = content[0]
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                item["content"] = part["text"]
        out.append(item)
    return out


def _params(body: Mapping[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name, value in body.items():
        if name not in ANSWER_PARAMS or value is None:
            continue
        if isinstance(value, bool):
            normal: Any = value
        elif isinstance(value, float) or (isinstance(value, int) and abs(value) <= _EXACT):
            normal = float(value) + 0.0  # 1 == 1.0, and -0.0 + 0.0 is 0.0
        else:
            normal = value
        if name in _DEFAULTS and normal == _DEFAULTS[name]:
            continue
        params[name] = normal
    return params
