"""The chat requests in flight, so that a SIGTERM can let them finish and cancel the rest.

``serve`` drains in this order (``drain_app``): ``/readyz`` turns 503, the listening socket
closes (connections already open stay, each closed after its next answer), the requests in
flight get the grace period less a reserve to finish, the rest are cancelled and get the
reserve to log themselves (a cancelled request answers 503 ``shutting_down`` when it can and
is logged with that status), and only then do the app's cleanups close the runtime: the
request log, the upstream pools, the semantic stage and its embedder.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import web

__all__ = ["DrainResult", "InFlight", "drain_reserve_s", "drain_runner"]

_log = logging.getLogger("hybrid_gateway.serve")


@dataclass(frozen=True, slots=True)
class DrainResult:
    in_flight: int  # requests running when the drain began
    cancelled: int  # still running when the grace period ended
    unfinished: int  # still running after being cancelled and given the reserve


class InFlight:
    """The tasks running a chat request now (entered by the handler, left in its finally)."""

    __slots__ = ("_idle", "_tasks")

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._idle: asyncio.Event | None = None  # made by a drain, set when the set empties

    def __len__(self) -> int:
        return len(self._tasks)

    def enter(self) -> asyncio.Task[Any] | None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        return task

    def leave(self, task: asyncio.Task[Any] | None) -> None:
        if task is not None:
            self._tasks.discard(task)
        if not self._tasks and self._idle is not None:
            self._idle.set()

    async def drain(self, grace_s: float, reserve_s: float) -> DrainResult:
        """Wait up to ``grace_s - reserve_s`` for the requests, cancel what is left, then wait
        up to ``reserve_s`` for the cancelled ones to answer and log."""
        started = len(self._tasks)
        self._idle = asyncio.Event()
        if not self._tasks:
            self._idle.set()
        if not await _wait(self._idle, max(0.0, grace_s - reserve_s)):
            left = list(self._tasks)
            for task in left:
                task.cancel("gateway shutting down")
            await _wait(self._idle, reserve_s)
            return DrainResult(started, len(left), len(self._tasks))
        return DrainResult(started, 0, 0)


async def _wait(idle: asyncio.Event, timeout_s: float) -> bool:
    if idle.is_set():
        return True
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(idle.wait(), timeout_s)
    return idle.is_set()


def drain_reserve_s(grace_s: float) -> float:
    """The part of the grace period kept for cancelled requests to log (and the cleanups)."""
    return min(1.0, grace_s / 4)


async def drain_runner(runner: web.AppRunner, inflight: InFlight, grace_s: float) -> DrainResult:
    """Stop accepting, then drain ``inflight`` within ``grace_s`` (the caller's phase change
    to draining comes first, so ``/readyz`` already answers 503)."""
    for site in list(runner.sites):
        await site.stop()  # the listening socket closes; open connections stay for now
    result = await inflight.drain(grace_s, drain_reserve_s(grace_s))
    fields = {"in_flight": result.in_flight, "cancelled": result.cancelled,
              "unfinished": result.unfinished, "grace_s": grace_s}  # fmt: skip
    level = logging.WARNING if result.cancelled else logging.INFO
    _log.log(level, "drained", extra={"fields": fields})
    return result
