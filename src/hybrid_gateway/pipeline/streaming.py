"""Streams: relay an upstream's chunks as they come, and replay a cached answer as a stream.

``StreamAssembler`` sees every upstream payload once, on its way to the client: it decides what
is forwarded (the usage-only chunk is dropped for clients that did not ask for usage), and it
rebuilds the complete answer alongside, so a fully received stream can be cached and billed.

A cached answer is served to streaming and non-streaming clients alike, so only what
``replay_as_stream`` reproduces may be cached: per choice its role, its text content and its
finish reason.  An answer carrying anything else (tool calls, a refusal, audio, reasoning text,
logprobs) is relayed as it came but never cached (``replayable_choice``, ``cacheable``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from hybrid_gateway.accounting.tokens import count_tokens
from hybrid_gateway.types import Usage
from hybrid_gateway.upstreams.answers import empty_value
from hybrid_gateway.upstreams.sse import DONE, DONE_EVENT, frame, frame_json

# A finished answer (natural stop or max_tokens) is complete and may be cached; anything else
# (tool calls, content filter, a cut stream) is not.
CACHEABLE_FINISH = frozenset({"stop", "length"})

# What ``replay_as_stream`` rebuilds of a message (or a stream's deltas); any other field with a
# value (refusal, audio, tool_calls, reasoning_content, ...) would be lost in the replay.
REPLAYED_FIELDS = frozenset({"role", "content"})


def _unreplayed(fields: Mapping[str, Any]) -> bool:
    """A message or delta with a field the replay would drop, or content that is not text."""
    content = fields.get("content")
    if content is not None and not isinstance(content, str):
        return True
    return any(name not in REPLAYED_FIELDS and not empty_value(v) for name, v in fields.items())


def replayable_choice(choice: object) -> bool:
    """A finished ``chat.completion`` choice that ``replay_as_stream`` reproduces faithfully."""
    if not isinstance(choice, dict) or choice.get("finish_reason") not in CACHEABLE_FINISH:
        return False
    message = choice.get("message")
    return (
        isinstance(message, dict)
        and isinstance(message.get("content"), str)
        and not _unreplayed(message)
        and empty_value(choice.get("logprobs"))
    )


class StreamAssembler:
    def __init__(self, *, include_usage: bool, model: str | None = None) -> None:
        self._include_usage = include_usage
        # The model id the client asked for: chunks naming another (the upstream's) are
        # rewritten to it; the upstream's name is kept in ``upstream_model``.
        self._model = model
        self.upstream_model: str | None = None
        self._content: dict[int, list[str]] = {}
        self._finish: dict[int, str | None] = {}
        self._roles: dict[int, str] = {}
        self._meta: dict[str, Any] = {}
        self._indexes: set[int] = set()  # every choice seen, finished or not
        self._unreplayable = False  # a delta field or logprobs the replay would drop
        self.usage: Usage | None = None
        self.done = False
        self.chunks = 0

    def feed(self, payload: bytes) -> bytes | None:
        """Take one upstream data payload; return the SSE bytes to forward, or None."""
        if payload.strip() == DONE:
            self.done = True
            return None  # the caller sends [DONE] itself, after any synthesized usage
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return frame(payload)  # not ours to judge: relay it untouched
        if not isinstance(chunk, dict):
            return frame(payload)
        self.chunks += 1
        if self._model is not None and chunk.get("model", self._model) != self._model:
            self.upstream_model = str(chunk["model"])
            chunk["model"] = self._model
            payload = orjson.dumps(chunk)
        if not self._meta:
            self._meta = {k: chunk.get(k) for k in ("id", "created", "model") if k in chunk}
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = _usage(usage)
        choices = chunk.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                if isinstance(choice, dict):
                    self._take(choice)
        if not choices and isinstance(usage, dict) and not self._include_usage:
            return None
        return frame(payload)

    def _take(self, choice: Mapping[str, Any]) -> None:
        index = choice.get("index", 0)
        index = index if isinstance(index, int) else 0
        self._indexes.add(index)
        delta = choice.get("delta")
        if isinstance(delta, dict):
            if isinstance(delta.get("content"), str):
                self._content.setdefault(index, []).append(delta["content"])
            if isinstance(delta.get("role"), str):
                self._roles[index] = delta["role"]
            if _unreplayed(delta):
                self._unreplayable = True
        if not empty_value(choice.get("logprobs")):
            self._unreplayable = True
        if choice.get("finish_reason") is not None:
            self._finish[index] = choice["finish_reason"]

    @property
    def choices(self) -> int:
        """How many choices the stream carried (``n`` asked: a cached answer must have as many)."""
        return len(self._indexes)

    def text(self) -> str:
        return "".join("".join(parts) for parts in self._content.values())

    @property
    def cacheable(self) -> bool:
        """Complete, error-free, plain text: the only kind of stream worth caching.

        Every choice seen must have finished (stop or length): with ``n`` > 1 a choice still
        open at ``[DONE]`` would be stored half written."""
        return (
            self.done
            and not self._unreplayable
            and bool(self._indexes)
            and all(self._finish.get(i) in CACHEABLE_FINISH for i in self._indexes)
        )

    def final_usage(self, prompt_tokens_estimate: int) -> Usage:
        if self.usage is not None:
            return self.usage
        return Usage(prompt_tokens_estimate, count_tokens(self.text()), estimated=True)

    def usage_event(self, usage: Usage) -> bytes:
        """A usage-only chunk for a client that asked for usage when the upstream sent none."""
        return frame_json(
            {**self._meta, "object": "chat.completion.chunk", "choices": [],
             "usage": usage.as_openai()}
        )  # fmt: skip

    def completion_body(self, usage: Usage) -> bytes:
        """The whole answer as a ``chat.completion`` body (what the cache stores)."""
        indexes = sorted(self._indexes)
        choices = [
            {
                "index": i,
                "message": {"role": self._roles.get(i, "assistant"),
                            "content": "".join(self._content.get(i, []))},
                "finish_reason": self._finish.get(i),
            }
            for i in indexes
        ]  # fmt: skip
        body = {**self._meta, "object": "chat.completion", "choices": choices,
                "usage": usage.as_openai()}  # fmt: skip
        return orjson.dumps(body)


def replay_as_stream(body: bytes, *, include_usage: bool) -> list[bytes]:
    """SSE events that deliver a stored ``chat.completion`` to a streaming client."""
    completion = orjson.loads(body)
    meta = {
        "id": completion.get("id", "chatcmpl-cached"),
        "object": "chat.completion.chunk",
        "created": completion.get("created", 0),
        "model": completion.get("model", ""),
    }
    events: list[bytes] = []
    for choice in completion.get("choices", []):
        index = choice.get("index", 0)
        message = choice.get("message") or {}
        role = message.get("role", "assistant")
        content = message.get("content") or ""
        events.append(
            frame_json(
                {
                    **meta,
                    "choices": [
                        {
                            "index": index,
                            "delta": {"role": role, "content": ""},
                            "finish_reason": None,
                        }
                    ],
                }
            )
        )
        if content:
            events.append(
                frame_json(
                    {
                        **meta,
                        "choices": [
                            {"index": index, "delta": {"content": content}, "finish_reason": None}
                        ],
                    }
                )
            )
        events.append(
            frame_json(
                {
                    **meta,
                    "choices": [
                        {
                            "index": index,
                            "delta": {},
                            "finish_reason": choice.get("finish_reason", "stop"),
                        }
                    ],
                }
            )
        )
    if include_usage and isinstance(completion.get("usage"), dict):
        events.append(frame_json({**meta, "choices": [], "usage": completion["usage"]}))
    events.append(DONE_EVENT)
    return events  # fmt: skip


def _usage(raw: Mapping[str, Any]) -> Usage:
    prompt = raw.get("prompt_tokens")
    completion = raw.get("completion_tokens")
    return Usage(
        prompt_tokens=prompt if isinstance(prompt, int) else 0,
        completion_tokens=completion if isinstance(completion, int) else 0,
    )


def usage_from_completion(body: Mapping[str, Any]) -> Usage | None:
    raw = body.get("usage")
    return _usage(raw) if isinstance(raw, dict) else None
