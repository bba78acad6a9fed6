"""Time as an injected dependency.

Every policy that waits or measures (retries, breakers, limiters, budgets, the emulator's engine,
the exact cache's TTL) takes a ``Clock`` so tests can drive time by hand and never sleep.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds; only differences are meaningful."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class MonotonicClock:
    """The real clock: ``time.monotonic`` and ``asyncio.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class ManualClock:
    """A clock for tests: time moves only when ``advance`` is called.

    ``sleep`` parks the caller until ``advance`` has moved time past its deadline, so code under
    test runs its real waiting logic without wall-clock delay.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        # (deadline, order, future): order breaks ties so futures are never compared
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = 0

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._order += 1
        self._sleepers.append((self._now + seconds, self._order, future))
        self._sleepers.sort(key=lambda item: (item[0], item[1]))
        await future

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking sleepers in deadline order and letting them run."""
        target = self._now + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, future = self._sleepers.pop(0)
            self._now = max(self._now, deadline)
            if not future.done():
                future.set_result(None)
            for _ in range(5):  # let woken tasks run to their next await
                await asyncio.sleep(0)
        self._now = target
        for _ in range(5):
            await asyncio.sleep(0)

    @property
    def sleepers(self) -> int:
        return sum(1 for _, _, f in self._sleepers if not f.done())
