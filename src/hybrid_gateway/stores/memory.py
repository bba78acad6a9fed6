"""``MemoryStore``: the ``KVStore`` contract in this process, on the injected clock.

The reference the Redis scripts are checked against (one contract suite runs on both), and the
store a single replica can use without Redis.  The gateway's default ``backend: memory`` keeps
using its own in-process objects (``RateLimiter``, ``BudgetBook``, ...) directly, which need no
await; this class is for code written against the seam.  Expired entries are dropped lazily.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.stores.base import BreakerVerdict, BucketSpec, SpendKey

__all__ = ["WINDOW_BUCKETS", "MemoryStore"]

# The rolling breaker window is kept in this many buckets, as in resilience/breaker.py.
WINDOW_BUCKETS = 10


class MemoryStore:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (level, stamp)
        self._values: dict[str, tuple[object, float]] = {}  # key -> (value, expires_at)

    async def take(
        self, buckets: Sequence[BucketSpec], *, force: bool = False
    ) -> tuple[float, int]:
        now = self._clock.now()
        levels = [self._level(b, now) for b in buckets]
        wait, worst = 0.0, -1
        if not force:
            for i, (b, level) in enumerate(zip(buckets, levels, strict=True)):
                need = min(b.amount, b.capacity) - level
                if need > 0 and need / b.rate > wait:
                    wait, worst = need / b.rate, i
            if worst >= 0:
                return wait, worst
        for b, level in zip(buckets, levels, strict=True):
            self._buckets[b.key] = (min(b.capacity, level - b.amount), now)
        return 0.0, -1

    async def add_spend(
        self, keys: Sequence[SpendKey], amount: float, once: SpendKey | None = None
    ) -> tuple[float, ...]:
        now = self._clock.now()
        if once is not None:
            if self._live(once.key, now) is not None:
                return tuple(self._number(k.key, now) for k in keys)
            self._values[once.key] = (1, now + once.ttl_s)
        totals = []
        for k in keys:
            total = self._number(k.key, now) + amount
            self._values[k.key] = (total, now + k.ttl_s)
            totals.append(total)
        return tuple(totals)

    async def read_spend(self, keys: Sequence[str]) -> tuple[float, ...]:
        now = self._clock.now()
        return tuple(self._number(k, now) for k in keys)

    async def get(self, key: str) -> bytes | None:
        value = self._live(key, self._clock.now())
        return value if isinstance(value, bytes) else None

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        self._values[key] = (value, self._clock.now() + ttl_s)

    async def breaker_report(
        self, key: str, successes: int, failures: int, *, window_s: float, min_requests: int,
        error_rate: float, open_s: float,
    ) -> BreakerVerdict:  # fmt: skip
        now = self._clock.now()
        opened = self._live(key + ":open", now)
        if isinstance(opened, float):
            return BreakerVerdict(max(0.0, opened - now))
        bucket_s = window_s / WINDOW_BUCKETS
        index = math.floor(now / bucket_s)
        window = self._live(key + ":window", now)
        counts: dict[int, list[int]] = window if isinstance(window, dict) else {}
        for old in [i for i in counts if i <= index - WINDOW_BUCKETS]:
            del counts[old]
        slot = counts.setdefault(index, [0, 0])
        slot[0] += successes
        slot[1] += failures
        self._values[key + ":window"] = (counts, now + 2 * window_s)
        ok = sum(c[0] for c in counts.values())
        bad = sum(c[1] for c in counts.values())
        if ok + bad >= min_requests and bad / (ok + bad) >= error_rate:
            self._values.pop(key + ":window", None)
            self._values[key + ":open"] = (now + open_s, now + open_s)
            return BreakerVerdict(open_s)
        return BreakerVerdict(0.0)

    async def breaker_open(self, key: str, open_s: float) -> None:
        now = self._clock.now()
        self._values.pop(key + ":window", None)
        self._values[key + ":open"] = (now + open_s, now + open_s)

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        self._buckets.clear()
        self._values.clear()

    def _level(self, bucket: BucketSpec, now: float) -> float:
        level, stamp = self._buckets.get(bucket.key, (bucket.capacity, now))
        return min(bucket.capacity, level + max(0.0, now - stamp) * bucket.rate)

    def _live(self, key: str, now: float) -> object | None:
        entry = self._values.get(key)
        if entry is None:
            return None
        if entry[1] <= now:
            del self._values[key]
            return None
        return entry[0]

    def _number(self, key: str, now: float) -> float:
        value = self._live(key, now)
        return float(value) if isinstance(value, int | float) else 0.0
