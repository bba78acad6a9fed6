"""Server-sent events, both directions: frame our own events, split an upstream's.

The relay is event by event: each upstream ``data:`` payload is forwarded as soon as its
terminating blank line arrives, never buffered to the end of the stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import orjson

DONE = b"[DONE]"
DONE_EVENT = b"data: [DONE]\n\n"


def frame(payload: bytes) -> bytes:
    """One SSE event carrying ``payload`` as its data.

    A payload spanning lines (an upstream's multi-line data field, relayed) gets one ``data:``
    line per line: a bare newline inside a field would end it, and the reader would drop the
    rest.
    """
    if b"\n" not in payload and b"\r" not in payload:
        return b"data: " + payload + b"\n\n"
    lines = payload.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    return b"".join(b"data: " + line + b"\n" for line in lines) + b"\n"


def frame_json(obj: Any) -> bytes:
    return frame(orjson.dumps(obj))


def comment(text: str) -> bytes:
    """An SSE comment line: clients (the OpenAI SDKs included) ignore it."""
    return b": " + text.encode() + b"\n\n"


async def iter_data(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """Yield the data payload of each event in an upstream SSE byte stream, however chunked.

    Lines end with LF or CRLF; multi-line data fields are joined with newlines (per the SSE
    spec); comments, ``event:``, ``id:`` and ``retry:`` fields are dropped.  The caller sees
    ``[DONE]`` like any payload.
    """
    data: list[bytes] = []
    pending = b""
    async for chunk in chunks:
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()  # an unterminated last line waits for the next chunk
        for raw in lines:
            line = raw.rstrip(b"\r")
            if not line:
                if data:
                    yield b"\n".join(data)
                    data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(b" ") else value)
    if pending.startswith(b"data:"):  # a stream that ends without its final newline
        value = pending.rstrip(b"\r")[5:]
        data.append(value[1:] if value.startswith(b" ") else value)
    if data:
        yield b"\n".join(data)
