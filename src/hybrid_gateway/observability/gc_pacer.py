"""The cyclic garbage collector, paced by time as well as by allocations, and its pauses measured.

CPython collects its young generation when the container objects allocated, minus those freed,
pass a count (``serve.py`` sets 20,000: a request allocates hundreds of short-lived objects).  A
gateway whose caches keep what it allocates (semantic cache entries, the guards' parses, static
token vectors) frees old objects about as fast as it makes new ones, so that count rises slowly
while the young generation itself keeps growing.  Measured under
``bench overhead --pipeline full --gateway-workers 2`` (docs/smart-path-performance.md,
*Stalls*): a young collection came every 20-30 s per worker, held 20,000-44,000 objects with
600,000 references (the word tuples of 2,000-character prompts), and stopped the event loop for
40-115 ms: enough on its own to put a few of 800 open-loop requests past the p99.

``GcPacer`` also collects the young generation every ``interval_s`` (``server.gc``), so a pause
only ever covers what one interval allocated: the same objects are scanned once either way, in
small pauses instead of one large one.  Measured in the same run: the longest young pause
70-115 ms -> under 12 ms.  And it times every collection, automatic or paced, into
``hybrid_gateway_gc_pause_seconds{generation}``.

Each young collection also counts toward the older generations' thresholds (a middle one
every 50 young ones: every 5 s at 100 ms, over what survived those 5 s).  Left at 100, the
full collection, which scans every long-lived object the cache holds, would be considered
every 500 s (unpaced, 5,000 young collections apart: more than a day at one every 20-30 s);
``install`` raises that threshold so it comes at most about once an hour (``FULL_EVERY_S``),
and the interpreter still skips it until the old generation has grown by a quarter.
"""

from __future__ import annotations

import asyncio
import gc
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["FULL_EVERY_S", "GcPacer"]

FULL_EVERY_S = 3600.0  # paced: a full collection considered at most this often

Observe = Callable[[int, float], None]  # (generation, pause seconds)


class GcPacer:
    """``install`` the pause timer; ``run`` the young collections until cancelled."""

    def __init__(
        self,
        interval_s: float,
        observe: Observe,
        *,
        collect: Callable[[int], object] = gc.collect,
        timer: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.interval_s = interval_s
        self._observe = observe
        self._collect = collect
        self._timer = timer
        self._sleep = sleep
        self._started: float | None = None
        self._thresholds: tuple[int, int, int] | None = None  # before ``install``

    def install(self) -> None:
        """Time every collection; when pacing, keep full collections about hourly."""
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)
        if self.interval_s > 0 and self._thresholds is None:
            young, middle, old = self._thresholds = gc.get_threshold()
            every = math.ceil(FULL_EVERY_S / (self.interval_s * max(middle, 1)))
            gc.set_threshold(young, middle, max(old, every))

    def uninstall(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None

    async def run(self) -> None:
        """Collect the young generation every ``interval_s`` (nothing to do when it is 0)."""
        if self.interval_s <= 0:
            return
        while True:
            await self._sleep(self.interval_s)
            self._collect(0)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        # Called by the interpreter around every collection, in whichever thread triggered it;
        # collections never overlap (the GIL and the collector's own flag), so one start slot
        # is enough.
        if phase == "start":
            self._started = self._timer()
        elif self._started is not None:
            self._observe(int(info["generation"]), self._timer() - self._started)
            self._started = None
