"""The OpenAI wire format: encode completions, stream chunks and errors.

Bodies are built with orjson; a streamed chunk is a precomputed prefix and suffix around the
JSON-encoded token piece, so streaming costs one small ``orjson.dumps`` per token.  A streamed
tool call goes as OpenAI sends it: a first delta with the call's index, id, type, function name
and empty arguments, then one delta per fragment of the arguments.  With ``n > 1`` every chunk
carries one choice and its index.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import orjson

from .replies import Choice, Reply

_ERROR_TYPES: Mapping[int, str] = MappingProxyType(
    {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "invalid_request_error",
        413: "invalid_request_error",
        422: "invalid_request_error",
        429: "rate_limit_error",
    }
)
_DONE = b"data: [DONE]\n\n"
_MARK = "\x00piece\x00"


def error_body(
    status: int, message: str, param: str | None = None, code: str | None = None
) -> bytes:
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    error = {"message": message, "type": kind, "param": param, "code": code}
    return orjson.dumps({"error": error})


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


class CompletionIds:
    """``chatcmpl-`` ids, unique per instance without a uuid per request."""

    def __init__(self) -> None:
        self._prefix = f"chatcmpl-{secrets.token_hex(6)}"
        self._counter = itertools.count()

    def next(self) -> str:
        return f"{self._prefix}{next(self._counter):08x}"


def _message(choice: Choice) -> dict[str, Any]:
    if choice.call is None:
        return {"role": "assistant", "content": choice.text}
    function = {"name": choice.call.name, "arguments": choice.text}
    tool_call = {"id": choice.call.id, "type": "function", "function": function}
    return {"role": "assistant", "content": None, "tool_calls": [tool_call]}


def completion_body(rid: str, created: int, model: str, reply: Reply) -> bytes:
    choices = [
        {
            "index": choice.index,
            "message": _message(choice),
            "logprobs": None,
            "finish_reason": choice.finish_reason,
        }
        for choice in reply.choices
    ]
    return orjson.dumps(
        {
            "id": rid,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": choices,
            "usage": _usage(reply.prompt_tokens, reply.completion_tokens),
        }
    )


class ChunkEncoder:
    """The SSE frames of one streamed completion, in the order OpenAI sends them.

    ``advance(choice, start, stop)`` gives the frames for the choice's tokens ``start..stop``:
    the role delta before its first token and the finish delta after its last.
    """

    def __init__(self, rid: str, created: int, model: str, include_usage: bool) -> None:
        self._head: dict[str, Any] = {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
        }
        self._include_usage = include_usage
        self._templates: dict[tuple[int, bool], tuple[bytes, bytes]] = {}

    def _frame(self, index: int, delta: dict[str, Any], finish_reason: str | None) -> bytes:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        chunk = {**self._head, "choices": [choice]}
        if self._include_usage:
            chunk["usage"] = None
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    def _template(self, index: int, arguments: bool) -> tuple[bytes, bytes]:
        """The bytes around a piece's JSON string: content, or a tool call's arguments."""
        key = (index, arguments)
        if key not in self._templates:
            delta: dict[str, Any] = {"content": _MARK}
            if arguments:
                delta = {"tool_calls": [{"index": 0, "function": {"arguments": _MARK}}]}
            before, after = self._frame(index, delta, None).split(orjson.dumps(_MARK), 1)
            self._templates[key] = before, after
        return self._templates[key]

    def pieces(self, index: int, pieces: Iterable[str], arguments: bool = False) -> bytes:
        before, after = self._template(index, arguments)
        return b"".join(before + orjson.dumps(piece) + after for piece in pieces)

    def advance(self, choice: Choice, start: int, stop: int, finish: bool = True) -> bytes:
        """Frames for tokens ``start..stop`` (a tool call's token 0 is its header)."""
        frames: list[bytes] = []
        call, index = choice.call, choice.index
        if start == 0 < stop:
            content = "" if call is None else None
            frames.append(self._frame(index, {"role": "assistant", "content": content}, None))
        if call is None:
            frames.append(self.pieces(index, choice.pieces[start:stop]))
        else:
            if start == 0 < stop:
                function = {"name": call.name, "arguments": ""}
                header = {"index": 0, "id": call.id, "type": "function", "function": function}
                frames.append(self._frame(index, {"tool_calls": [header]}, None))
            fragments = choice.pieces[max(start, 1) - 1 : max(stop, 1) - 1]
            frames.append(self.pieces(index, fragments, arguments=True))
        if finish and start < stop == choice.tokens:
            frames.append(self._frame(index, {}, choice.finish_reason))
        return b"".join(frames)

    def end(self, reply: Reply) -> bytes:
        """The usage chunk (when asked for) and ``[DONE]``."""
        if not self._include_usage:
            return _DONE
        usage = _usage(reply.prompt_tokens, reply.completion_tokens)
        usage_chunk = orjson.dumps({**self._head, "choices": [], "usage": usage})
        return b"data: " + usage_chunk + b"\n\n" + _DONE
