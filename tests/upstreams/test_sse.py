from __future__ import annotations

from collections.abc import AsyncIterator

from hybrid_gateway.upstreams.sse import comment, frame, iter_data


async def lines(*items: bytes) -> AsyncIterator[bytes]:
    for item in items:
        yield item


async def collect(*items: bytes) -> list[bytes]:
    return [payload async for payload in iter_data(lines(*items))]


async def test_events_split_on_blank_lines() -> None:
    got = await collect(b'data: {"a":1}\n', b"\n", b"data: [DONE]\n", b"\n")
    assert got == [b'{"a":1}', b"[DONE]"]


async def test_crlf_comments_fields_and_multiline_data() -> None:
    got = await collect(
        b": keep-alive\r\n", b"\r\n",
        b"event: message\r\n", b"id: 7\r\n", b"data: line1\r\n", b"data:line2\r\n", b"\r\n",
    )  # fmt: skip
    assert got == [b"line1\nline2"]


async def test_last_event_without_trailing_blank_line() -> None:
    assert await collect(b"data: tail\n") == [b"tail"]
    assert await collect(b"data: no newline at all") == [b"no newline at all"]


def test_framing() -> None:
    assert frame(b"x") == b"data: x\n\n"
    assert comment("hello") == b": hello\n\n"


async def test_events_split_across_arbitrary_chunks() -> None:
    stream = b'data: {"a":1}\r\n\r\ndata: {"b":2}\n\n: ping\n\ndata: [DONE]\n\n'
    for size in (1, 2, 3, 7, len(stream)):
        pieces = [stream[i : i + size] for i in range(0, len(stream), size)]
        assert await collect(*pieces) == [b'{"a":1}', b'{"b":2}', b"[DONE]"], size
