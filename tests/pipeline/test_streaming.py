from __future__ import annotations

from typing import Any

import orjson
import pytest

from hybrid_gateway.pipeline.streaming import StreamAssembler, replay_as_stream, replayable_choice
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


def choices(*items: dict[str, Any]) -> bytes:
    return orjson.dumps({"id": "c1", "object": "chat.completion.chunk", "choices": list(items)})


def test_every_choice_must_finish() -> None:
    """n=2: choice 1 still open at [DONE] would be stored half written, finish_reason null."""
    open_one = StreamAssembler(include_usage=False)
    feed_all(open_one, [
        choices({"index": 0, "delta": {"content": "A"}}, {"index": 1, "delta": {"content": "B"}}),
        choices({"index": 0, "delta": {}, "finish_reason": "stop"}), b"[DONE]"])  # fmt: skip
    assert not open_one.cacheable
    both = StreamAssembler(include_usage=False)
    feed_all(both, [
        choices({"index": 0, "delta": {"content": "A"}}, {"index": 1, "delta": {"content": "B"}}),
        choices({"index": 0, "delta": {}, "finish_reason": "stop"},
                {"index": 1, "delta": {}, "finish_reason": "length"}), b"[DONE]"])  # fmt: skip
    assert both.cacheable
    body = orjson.loads(both.completion_body(Usage(1, 2)))
    assert [c["finish_reason"] for c in body["choices"]] == ["stop", "length"]


@pytest.mark.parametrize(
    "delta",
    [{"refusal": "I can't help with that."}, {"audio": {"id": "a", "data": "UklGR"}},
     {"reasoning_content": "First, ..."}, {"reasoning": "First, ..."},
     {"function_call": {"name": "f"}}, {"content": [{"type": "text", "text": "x"}]}],
    ids=["refusal", "audio", "reasoning_content", "reasoning", "function_call", "content-list"],
)  # fmt: skip
def test_a_delta_the_replay_would_drop_is_not_cacheable(delta: dict[str, Any]) -> None:
    a = StreamAssembler(include_usage=False)
    out = feed_all(a, [chunk({"role": "assistant", "content": ""}), chunk(delta),
                       chunk({}, "stop"), b"[DONE]"])  # fmt: skip
    assert out[1] == b"data: " + chunk(delta) + b"\n\n"  # relayed all the same
    assert not a.cacheable


def test_empty_extra_fields_and_logprobs_in_a_stream() -> None:
    plain = StreamAssembler(include_usage=False)
    feed_all(plain, [chunk({"role": "assistant", "content": "", "refusal": None,
                            "reasoning_content": None, "tool_calls": []}),
                     chunk({"content": "Hi"}), chunk({}, "stop"), b"[DONE]"])  # fmt: skip
    assert plain.cacheable
    logprobs = StreamAssembler(include_usage=False)
    with_logprobs = choices(
        {
            "index": 0,
            "delta": {"content": "Hi"},
            "logprobs": {"content": [{"token": "Hi", "logprob": -0.1}]},
        }
    )
    feed_all(logprobs, [with_logprobs, chunk({}, "stop"), b"[DONE]"])
    assert not logprobs.cacheable


@pytest.mark.parametrize(
    ("choice", "replayable"),
    [({"message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}, True),
     ({"message": {"role": "assistant", "content": "Hi", "refusal": None, "annotations": []},
       "finish_reason": "length", "logprobs": None}, True),
     ({"message": {"role": "assistant", "content": "Hi"}, "finish_reason": "content_filter"},
      False),
     ({"message": {"role": "assistant", "content": None, "refusal": "No."},
       "finish_reason": "stop"}, False),
     ({"message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop",
       "logprobs": {"content": [{"token": "Hi"}]}}, False),
     ({"message": {"role": "assistant", "content": "", "tool_calls": [{"id": "t"}]},
       "finish_reason": "stop"}, False)],
)  # fmt: skip
def test_replayable_choice(choice: dict[str, Any], replayable: bool) -> None:
    assert replayable_choice(choice) is replayable
    if replayable:  # what the replay delivers is the stored message
        body = orjson.dumps({"choices": [{"index": 0, **choice}]})
        events = [orjson.loads(e[6:]) for e in replay_as_stream(body, include_usage=False)[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in events)
        assert text == choice["message"]["content"]
        assert events[-1]["choices"][0]["finish_reason"] == choice["finish_reason"]
