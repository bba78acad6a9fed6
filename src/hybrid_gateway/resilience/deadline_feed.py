"""The deadline runner's stream plumbing: the shadow stream's events, queued or assembled.

A deadline call runs on a copy of the request's record (the *shadow*); its stream events go
through a ``Feed``: queued for a client that got its first byte in time, or assembled once the
answer is to be delivered later (or, with ``deadline_on: first_token``, from the start).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable

from hybrid_gateway.errors import GatewayError
from hybrid_gateway.pipeline.streaming import StreamAssembler
from hybrid_gateway.types import RequestRecord

__all__ = ["END", "Feed", "Item", "broke", "copy_record", "relay", "shadow_of"]


class End:
    pass


END = End()
Item = bytes | BaseException | End


class Feed:
    """Events from the shadow stream: queued for the client, or assembled once detached."""

    def __init__(self, now: Callable[[], float] | None = None) -> None:
        self.queue: asyncio.Queue[Item] = asyncio.Queue()
        self.assembler: StreamAssembler | None = None
        self.error: BaseException | None = None
        # first_token's progress, kept while assembling: set at the first event, and when the
        # last one came (with ``now``, the runner's clock)
        self.moved = asyncio.Event()
        self.last_at = 0.0
        self._now = now

    @property
    def started(self) -> bool:
        return self.moved.is_set()

    def put(self, item: Item) -> None:
        if self.assembler is None:
            self.queue.put_nowait(item)
        elif isinstance(item, bytes):
            if self._now is not None:
                self.last_at = self._now()
            if not self.moved.is_set():
                self.moved.set()
            for line in item.split(b"\n"):
                if line.startswith(b"data: "):
                    self.assembler.feed(line[6:])
        elif isinstance(item, BaseException):
            self.error = item

    def detach(self) -> None:
        """From now on events are assembled, not queued (including any already queued)."""
        self.assembler = StreamAssembler(include_usage=True)
        while not self.queue.empty():
            self.put(self.queue.get_nowait())


async def relay(
    head: Item, feed: Feed, shadow: RequestRecord, record: RequestRecord
) -> AsyncIterator[bytes]:
    """The shadow stream, to a client that got its first byte in time."""
    item = head
    try:
        while not isinstance(item, End):
            if isinstance(item, BaseException):
                raise item
            yield item
            item = await feed.queue.get()
    finally:
        copy_record(shadow, record)


def broke(producer: asyncio.Future[None], feed: Feed) -> bool:
    """Did a started stream end in an upstream failure (a 5xx the fallback can answer)?"""
    if producer.cancelled() or not feed.started:
        return False
    error = producer.exception()
    return isinstance(error, GatewayError) and error.status >= 500


def shadow_of(record: RequestRecord) -> RequestRecord:
    return dataclasses.replace(record, extra=dict(record.extra))


def copy_record(source: RequestRecord, target: RequestRecord) -> None:
    for field in dataclasses.fields(RequestRecord):
        setattr(target, field.name, getattr(source, field.name))
