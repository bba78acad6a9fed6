from __future__ import annotations

from typing import Any

import orjson

from hybrid_gateway.pipeline.streaming import StreamAssembler, replay_as_stream
from hybrid_gateway.types import Usage


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    body: dict[str, Any] = {"id": "c1", "object": "chat.completion.chunk", "created": 5,
                            "model": "m", "choices": []}  # fmt: skip
    if delta is not None:
        body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    body.update(extra)
    return orjson.dumps(body)


USAGE_CHUNK = chunk(usage={"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9})


def feed_all(assembler: StreamAssembler, payloads: list[bytes]) -> list[bytes | None]:
    return [assembler.feed(p) for p in payloads]


def test_relays_and_rebuilds_the_answer() -> None:
    a = StreamAssembler(include_usage=True)
    out = feed_all(a, [chunk({"role": "assistant", "content": "Hel"}), chunk({"content": "lo"}),
                       chunk({}, "stop"), USAGE_CHUNK, b"[DONE]"])  # fmt: skip
    assert out[:4] == [b"data: " + p + b"\n\n" for p in
                       [chunk({"role": "assistant", "content": "Hel"}), chunk({"content": "lo"}),
                        chunk({}, "stop"), USAGE_CHUNK]]  # fmt: skip
    assert out[4] is None and a.done and a.cacheable
    assert a.usage == Usage(7, 2)
    body = orjson.loads(a.completion_body(a.final_usage(0)))
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Hello"}
    assert body["usage"]["total_tokens"] == 9


def test_usage_chunk_dropped_when_not_asked() -> None:
    a = StreamAssembler(include_usage=False)
    assert a.feed(USAGE_CHUNK) is None
    assert a.usage == Usage(7, 2)


def test_incomplete_or_tool_streams_are_not_cacheable() -> None:
    cut = StreamAssembler(include_usage=False)
    feed_all(cut, [chunk({"content": "Hel"})])
    assert not cut.cacheable
    tools = StreamAssembler(include_usage=False)
    feed_all(tools, [chunk({"tool_calls": [{"index": 0, "id": "t"}]}), chunk({}, "tool_calls"),
                     b"[DONE]"])  # fmt: skip
    assert not tools.cacheable


def test_missing_usage_is_estimated() -> None:
    a = StreamAssembler(include_usage=True)
    feed_all(a, [chunk({"content": "hello world"}), chunk({}, "stop"), b"[DONE]"])
    usage = a.final_usage(prompt_tokens_estimate=11)
    assert usage.estimated and usage.prompt_tokens == 11 and usage.completion_tokens > 0
    assert b'"usage"' in a.usage_event(usage)


def test_replay_as_stream() -> None:
    body = orjson.dumps({"id": "x", "created": 1, "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})  # fmt: skip
    events = replay_as_stream(body, include_usage=True)
    assert events[-1] == b"data: [DONE]\n\n"
    decoded = [orjson.loads(e[6:]) for e in events[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in decoded[:-1]) == "Hi"
    assert decoded[-1]["usage"]["total_tokens"] == 2
    assert len(replay_as_stream(body, include_usage=False)) == len(events) - 1
