"""Writes to the shared store that a request must not wait for, sent in order by one task.

Settling a request (token correction) and recording a deferred result happen in synchronous
code on the request path; their Redis writes are queued here and sent one after another, in
the order they were queued (so a result's ``done`` never overtakes its ``pending``).  While the
store is down each write fails fast and is dropped (counted by ``StoreHealth``); the queue is
bounded so an outage cannot grow memory.

``submit`` returns a future that completes once the write has been tried (sent, dropped or
failed): a caller that must not answer before the write is visible to other replicas (a
deferred result's ``pending``) awaits it, with its own bound; the others ignore it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from hybrid_gateway.stores.base import StoreUnavailable

__all__ = ["Outbox"]

_log = logging.getLogger(__name__)

Write = Callable[[], Awaitable[object]]


class Outbox:
    def __init__(self, max_queued: int = 10_000) -> None:
        self._queue: asyncio.Queue[tuple[Write, asyncio.Future[None]]] = asyncio.Queue(max_queued)
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0

    def submit(self, write: Write) -> asyncio.Future[None]:
        """Queue ``write``; the future completes when it has been tried (or at once if dropped)."""
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._task = loop.create_task(self._run())
        tried: asyncio.Future[None] = loop.create_future()
        try:
            self._queue.put_nowait((write, tried))
        except asyncio.QueueFull:
            self.dropped += 1
            tried.set_result(None)
        return tried

    async def drain(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for the queued writes, then stop the sender."""
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout_s)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        while not self._queue.empty():  # not sent: nobody waits on them any longer
            _, tried = self._queue.get_nowait()
            self.dropped += 1
            if not tried.done():  # a waiter may have cancelled it
                tried.set_result(None)
            self._queue.task_done()

    async def _run(self) -> None:
        while True:
            write, tried = await self._queue.get()
            try:
                await write()
            except StoreUnavailable:
                self.dropped += 1
            except Exception:  # a bug in one write must not stop the others
                _log.exception("shared-store write failed")
            finally:
                if not tried.done():
                    tried.set_result(None)
                self._queue.task_done()
