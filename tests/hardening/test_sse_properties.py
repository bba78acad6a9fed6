"""Property tests of SSE framing and the stream relay (upstreams/sse.py, pipeline/streaming.py).

However the upstream's bytes are cut into reads, the relay sees the same events; what the
gateway frames, a client (and the gateway itself) parses back to the same payloads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid_gateway.pipeline.streaming import StreamAssembler, replay_as_stream
from hybrid_gateway.types import Usage
from hybrid_gateway.upstreams.sse import DONE_EVENT, comment, frame, iter_data


async def _chunks(data: bytes, cuts: Sequence[int]) -> AsyncIterator[bytes]:
    start = 0
    for cut in sorted(set(cuts)):
        yield data[start:cut]
        start = cut
    yield data[start:]


async def _events(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    return [payload async for payload in iter_data(_chunks(data, cuts))]


def _cuts(size: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, size), max_size=12)


def _run(coro: Any) -> Any:
    import asyncio

    return asyncio.run(coro)


# Payload text as an upstream may send it, newlines included (multi-line data fields).
_PAYLOAD = st.text(max_size=30).map(str.encode) | st.binary(max_size=30)
_EOL = st.sampled_from([b"\n", b"\r\n"])


@st.composite
def upstream_streams(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    """An SSE byte stream in any of the spec's spellings, and the payloads it carries."""
    out, payloads = b"", []
    for _ in range(draw(st.integers(0, 5))):
        eol = draw(_EOL)
        if draw(st.booleans()):
            out += b": keep-alive" + eol + eol
        if draw(st.booleans()):
            out += b"event: message" + eol + b"id: 1" + eol
        values = []
        for line in draw(st.lists(st.text(max_size=10).filter(_one_line), min_size=1, max_size=3)):
            value = draw(st.sampled_from(["", " "])) + line
            out += b"data:" + value.encode() + eol
            values.append(value.removeprefix(" "))  # the spec drops one space after the colon
        out += eol
        payloads.append("\n".join(values).encode())
    return out, payloads


def _one_line(text: str) -> bool:
    return "\n" not in text and "\r" not in text


@settings(max_examples=300)
@given(upstream_streams(), st.data())
def test_any_chunking_of_an_upstream_stream_yields_the_same_events(
    stream: tuple[bytes, list[bytes]], data: st.DataObject
) -> None:
    raw, payloads = stream
    cuts = data.draw(_cuts(len(raw)))
    assert _run(_events(raw, cuts)) == payloads


@settings(max_examples=300)
@given(st.lists(_PAYLOAD, max_size=5), st.data())
def test_what_the_gateway_frames_parses_back_to_the_same_payloads(
    payloads: list[bytes], data: st.DataObject
) -> None:
    raw = b"".join(frame(p) for p in payloads) + comment("x-gateway-cost-usd=0.1") + DONE_EVENT
    cuts = data.draw(_cuts(len(raw)))
    # SSE has no way to carry a lone CR: a reader takes CR, LF and CRLF all as line ends.
    expected = [p.replace(b"\r\n", b"\n").replace(b"\r", b"\n") for p in payloads]
    assert _run(_events(raw, cuts)) == [*expected, b"[DONE]"]


def test_regression_a_multi_line_payload_is_framed_as_one_event() -> None:
    """Found by the framing property: ``frame(b"a\\nb")`` wrote ``data: a\\nb\\n\\n``, whose
    second line a client drops, so a relayed multi-line upstream event reached clients cut."""
    assert frame(b'{"a":\n1}') == b'data: {"a":\ndata: 1}\n\n'
    assert _run(_events(frame(b"x\r\ny\rz"), [])) == [b"x\ny\nz"]


def _chunk(content: str, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": finish}
    return orjson.dumps({"id": "c1", "object": "chat.completion.chunk", "choices": [choice]})


@settings(max_examples=200)
@given(st.lists(st.text(max_size=12), min_size=1, max_size=8), st.booleans(), st.data())
def test_the_relay_forwards_every_chunk_and_rebuilds_the_answer(
    pieces: list[str], include_usage: bool, data: st.DataObject
) -> None:
    upstream = [_chunk(p) for p in pieces] + [_chunk("", "stop")]
    usage = orjson.dumps(
        {"id": "c1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}}
    )
    raw = b"".join(frame(p) for p in [*upstream, usage]) + DONE_EVENT
    cuts = data.draw(_cuts(len(raw)))

    async def relay() -> tuple[StreamAssembler, list[bytes]]:
        assembler = StreamAssembler(include_usage=include_usage)
        out = []
        async for payload in iter_data(_chunks(raw, cuts)):
            forwarded = assembler.feed(payload)
            if forwarded is not None:
                out.append(forwarded)
        return assembler, out

    assembler, forwarded = _run(relay())
    relayed = _run(_events(b"".join(forwarded), []))
    assert relayed == ([*upstream, usage] if include_usage else upstream)
    assert assembler.done and assembler.cacheable
    assert assembler.text() == "".join(pieces)
    assert assembler.final_usage(0) == Usage(3, 5)


@settings(max_examples=200)
@given(st.text(max_size=40), st.booleans())
def test_a_cached_answer_replays_as_a_stream_of_the_same_text(
    text: str, include_usage: bool
) -> None:
    assembler = StreamAssembler(include_usage=True)
    for payload in (_chunk(text), _chunk("", "stop"), b"[DONE]"):
        assembler.feed(payload)
    body = assembler.completion_body(Usage(1, 2))
    events = _run(_events(b"".join(replay_as_stream(body, include_usage=include_usage)), []))
    assert events[-1] == b"[DONE]"
    replayed = StreamAssembler(include_usage=include_usage)
    for event in events:
        replayed.feed(event)
    assert replayed.text() == text and replayed.cacheable
    assert (replayed.usage is not None) == include_usage
