"""Lane gates: each lane's own slots and bounded queue on each channel it uses.

A channel's semaphore (``upstreams/openai_http.py``) is shared by every lane that uses it, so a
flood of long heavy requests could take all its slots and make a light request wait behind them
(the seed saw complex p99 go 4 s -> 9 s until lanes were split).  A gate per (lane, channel)
gives each lane a fixed share instead: the config check keeps the shares within the channel's
``max_concurrency``, so the channel's semaphore never makes anyone wait once gates are on.

Waiting is bounded twice: at most ``max_waiting`` requests queue (one more is refused at once,
503 ``lane_queue_full``), and none waits longer than ``timeout_s`` (503 ``lane_queue_timeout``);
both with ``Retry-After``.  Memory therefore stays bounded however hard the lane is pushed.
Slots are handed to waiters in arrival order.  The deadline runs on the injected clock.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress

from hybrid_gateway.errors import Overloaded
from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.resilience.settings import LaneQueueConfig

__all__ = ["LaneGate", "LaneGates"]


class LaneGate:
    """``max_concurrency`` slots with a FIFO queue of at most ``max_waiting`` and a deadline."""

    def __init__(self, lane: str, channel: str, limits: LaneQueueConfig, clock: Clock) -> None:
        self.lane = lane
        self.channel = channel
        self._limits = limits
        self._clock = clock
        self.active = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.rejected: dict[str, int] = {}  # code -> count, for /metrics

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> float:
        """Take a slot; return how long that took (seconds) or raise ``Overloaded``."""
        if self.active < self._limits.max_concurrency and not self._waiters:
            self.active += 1
            return 0.0
        if len(self._waiters) >= self._limits.max_waiting:
            raise self._refuse("lane_queue_full", f"{len(self._waiters)} requests are waiting")
        started = self._clock.now()
        slot: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(slot)
        timer = asyncio.ensure_future(self._expire(slot))
        try:
            await slot
        except BaseException:
            if slot.done() and not slot.cancelled() and slot.exception() is None:
                self.release()  # the slot was handed over just as we were cancelled
            else:
                self._drop(slot)
            raise
        finally:
            timer.cancel()
        return self._clock.now() - started

    def release(self) -> None:
        """Give the slot to the longest waiter, or free it."""
        while self._waiters:
            slot = self._waiters.popleft()
            if not slot.done():
                slot.set_result(None)  # ``active`` stays: the slot changes hands
                return
        self.active -= 1

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[float]:
        waited = await self.acquire()
        try:
            yield waited
        finally:
            self.release()

    async def _expire(self, slot: asyncio.Future[None]) -> None:
        await self._clock.sleep(self._limits.timeout_s)
        if not slot.done():
            self._drop(slot)
            slot.set_exception(
                self._refuse("lane_queue_timeout", f"no slot within {self._limits.timeout_s:g} s")
            )

    def _drop(self, slot: asyncio.Future[None]) -> None:
        with suppress(ValueError):
            self._waiters.remove(slot)

    def _refuse(self, code: str, why: str) -> Overloaded:
        self.rejected[code] = self.rejected.get(code, 0) + 1
        return Overloaded(
            f"lane {self.lane} is at its limit on channel {self.channel} "
            f"({self._limits.max_concurrency} in flight; {why}); retry later",
            retry_after_s=self._limits.retry_after_s,
            code=code,
        )


class LaneGates:
    """The gates of every lane that has ``queue`` limits, keyed by (lane, channel)."""

    def __init__(self, gates: Mapping[tuple[str, str], LaneGate]) -> None:
        self.gates = dict(gates)

    @classmethod
    def build(
        cls,
        lanes: Mapping[str, tuple[LaneQueueConfig | None, tuple[str, ...]]],
        clock: Clock,
    ) -> LaneGates:
        """``lanes``: lane -> (its queue limits or None, the channels it uses)."""
        return cls(
            {
                (lane, channel): LaneGate(lane, channel, limits, clock)
                for lane, (limits, channels) in lanes.items()
                if limits is not None
                for channel in channels
            }
        )

    def get(self, lane: str, channel: str) -> LaneGate | None:
        return self.gates.get((lane, channel))
