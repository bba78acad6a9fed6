"""``RedisStore``: the ``KVStore`` contract on one Redis (``redis.asyncio``), for N replicas.

Every compound operation is one Lua script (``scripts.py``), so it is atomic across replicas
and costs one round trip.  Commands have a short timeout and no client-side retries: a slow or
dead Redis must turn into the configured outage behaviour quickly, not into stalled requests.
Failures are reported to ``StoreHealth`` and raised as ``StoreUnavailable``.

``redis`` is imported here only, so the gateway runs without the package when
``stores.backend`` is ``memory``.  A single Redis (or a primary with replicas) is assumed: the
multi-key scripts are not written for Redis Cluster slots.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from hybrid_gateway.stores.base import BreakerVerdict, BucketSpec, SpendKey, StoreUnavailable
from hybrid_gateway.stores.health import StoreHealth
from hybrid_gateway.stores.memory import WINDOW_BUCKETS
from hybrid_gateway.stores.scripts import BREAKER_OPEN, BREAKER_REPORT, SPEND, TAKE

__all__ = ["RedisStore"]

T = TypeVar("T")


class RedisStore:
    def __init__(self, url: str, *, prefix: str, timeout_s: float, health: StoreHealth) -> None:
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        self._errors: tuple[type[BaseException], ...] = (
            aioredis.RedisError, OSError, TimeoutError,
        )  # fmt: skip
        # No connection is made here: a Redis that is down at start-up is an outage, not a crash.
        self._client = aioredis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
            max_connections=256,
        )
        self._prefix = prefix
        self.health = health
        self._take = self._client.register_script(TAKE)
        self._spend = self._client.register_script(SPEND)
        self._report = self._client.register_script(BREAKER_REPORT)
        self._open = self._client.register_script(BREAKER_OPEN)

    @property
    def prefix(self) -> str:
        return self._prefix

    async def take(
        self, buckets: Sequence[BucketSpec], *, force: bool = False
    ) -> tuple[float, int]:
        args: list[Any] = ["1" if force else "0"]
        for b in buckets:
            args += [repr(b.rate), repr(b.capacity), repr(b.amount)]
        keys = [self._prefix + b.key for b in buckets]
        wait, worst = await self._run("take", lambda: self._take(keys=keys, args=args))
        return float(wait), int(worst)

    async def add_spend(
        self, keys: Sequence[SpendKey], amount: float, once: SpendKey | None = None
    ) -> tuple[float, ...]:
        all_keys = [*keys, once] if once is not None else list(keys)
        names = [self._prefix + k.key for k in all_keys]
        args = [repr(amount), "1" if once else "0", *(str(_ms(k.ttl_s)) for k in all_keys)]
        totals = await self._run("spend", lambda: self._spend(keys=names, args=args))
        return tuple(float(t) for t in totals)

    async def read_spend(self, keys: Sequence[str]) -> tuple[float, ...]:
        if not keys:
            return ()
        names = [self._prefix + k for k in keys]
        values = await self._run("spend", lambda: self._client.mget(names))
        return tuple(float(v) if v is not None else 0.0 for v in values)

    async def get(self, key: str) -> bytes | None:
        value = await self._run("get", lambda: self._client.get(self._prefix + key))
        return value if isinstance(value, bytes) else None

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        await self._run("set", lambda: self._client.set(self._prefix + key, value, px=_ms(ttl_s)))

    async def breaker_report(
        self, key: str, successes: int, failures: int, *, window_s: float, min_requests: int,
        error_rate: float, open_s: float,
    ) -> BreakerVerdict:  # fmt: skip
        keys = [self._prefix + key + ":window", self._prefix + key + ":open"]
        args: list[str | int] = [
            successes, failures, repr(window_s), WINDOW_BUCKETS, min_requests, repr(error_rate),
            repr(open_s),
        ]  # fmt: skip
        left = await self._run("breaker", lambda: self._report(keys=keys, args=args))
        return BreakerVerdict(max(0.0, float(left)))

    async def breaker_open(self, key: str, open_s: float) -> None:
        keys = [self._prefix + key + ":window", self._prefix + key + ":open"]
        await self._run("breaker", lambda: self._open(keys=keys, args=[repr(open_s)]))

    async def ping(self) -> None:
        await self._run("ping", self._client.ping)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _run(self, op: str, call: Callable[[], Awaitable[T]]) -> T:
        self.health.check()
        try:
            result = await call()
        except self._errors as exc:
            self.health.failed(op, exc)
            raise StoreUnavailable(f"redis {op}: {exc}") from exc
        self.health.succeeded()
        return result


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000 + 0.999))
