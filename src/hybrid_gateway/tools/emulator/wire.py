"""The OpenAI wire format: parse a chat request, encode completions, chunks and errors.

Bodies are built with orjson; a streamed chunk is a precomputed prefix and suffix around the
JSON-encoded token piece, so streaming costs one small ``orjson.dumps`` per token.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import orjson

from .text import Prompt

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


class BadRequestError(ValueError):
    """The request body is not a valid chat completion request (HTTP 400)."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass(frozen=True, slots=True)
class ChatCall:
    """The parts of a chat completion request the emulator acts on."""

    model: str
    prompt: Prompt
    max_tokens: int | None
    stream: bool
    include_usage: bool


def parse_chat_call(raw: bytes, default_model: str) -> ChatCall:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequestError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequestError("request body must be a JSON object")
    model = body.get("model", default_model)
    if not isinstance(model, str) or not model:
        raise BadRequestError("'model' must be a non-empty string", param="model")
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise BadRequestError("'stream' must be a boolean", param="stream")
    if body.get("n", 1) not in (1, None):
        raise BadRequestError("only n=1 is supported", param="n")
    options = body.get("stream_options") or {}
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    return ChatCall(
        model=model,
        prompt=Prompt.from_contents(_contents(body.get("messages"))),
        max_tokens=_max_tokens(body),
        stream=stream,
        include_usage=include_usage,
    )


def _contents(messages: Any) -> list[tuple[str, str]]:
    if not isinstance(messages, list) or not messages:
        raise BadRequestError("'messages' must be a non-empty array", param="messages")
    contents: list[tuple[str, str]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequestError(f"messages[{i}] must be an object with a 'role'", "messages")
        contents.append((message["role"], _text(message.get("content"), i)))
    return contents


def _text(content: Any, index: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):  # content parts: keep the text ones
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    raise BadRequestError(f"messages[{index}].content must be a string or an array", "messages")


def _max_tokens(body: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadRequestError(f"'{key}' must be a positive integer", param=key)
        return value
    return None


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


@dataclass(frozen=True, slots=True)
class Reply:
    """One answer, cut into token pieces, and why it stopped."""

    pieces: list[str]
    finish_reason: str  # "stop" or "length"
    prompt_tokens: int


def completion_body(rid: str, created: int, model: str, reply: Reply) -> bytes:
    message = {"role": "assistant", "content": "".join(reply.pieces)}
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": reply.finish_reason,
    }
    return orjson.dumps(
        {
            "id": rid,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [choice],
            "usage": _usage(reply.prompt_tokens, len(reply.pieces)),
        }
    )


class ChunkEncoder:
    """The SSE frames of one streamed completion, in the order OpenAI sends them."""

    def __init__(self, rid: str, created: int, model: str, include_usage: bool) -> None:
        self._head: dict[str, Any] = {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
        }
        self._include_usage = include_usage
        template = self._frame({"content": _MARK}, None)
        self._before, self._after = template.split(orjson.dumps(_MARK), 1)

    def _frame(self, delta: dict[str, str], finish_reason: str | None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        chunk = {**self._head, "choices": [choice]}
        if self._include_usage:
            chunk["usage"] = None
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    def role(self) -> bytes:
        return self._frame({"role": "assistant", "content": ""}, None)

    def content(self, pieces: Iterable[str]) -> bytes:
        before, after = self._before, self._after
        return b"".join(before + orjson.dumps(piece) + after for piece in pieces)

    def finish(self, reply: Reply) -> bytes:
        frames = [self._frame({}, reply.finish_reason)]
        if self._include_usage:
            usage = _usage(reply.prompt_tokens, len(reply.pieces))
            frames.append(b"data: " + orjson.dumps({**self._head, "choices": [], "usage": usage}))
            frames.append(b"\n\n")
        frames.append(_DONE)
        return b"".join(frames)
