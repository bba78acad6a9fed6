"""Everything a replica shares through Redis, built from ``config.stores``, and its sync loop.

``build_shared_state`` returns None for ``backend: memory``: the gateway then builds its
in-process objects exactly as before, at no extra cost per request.  For ``backend: redis`` it
returns the store, its health, the outbox and the shared versions of the rate limiter, budget
book, exact cache, results mirror and breaker sync; ``start`` runs the background loop that
exchanges breaker counts and budget spend every ``sync_interval_ms`` and pings the store while
it is down, so recovery is noticed even without traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from hybrid_gateway.errors import ConfigError
from hybrid_gateway.resilience.breaker import BreakerSettings
from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.stores.base import StoreUnavailable
from hybrid_gateway.stores.blobs import ResultsMirror, SharedExactCache
from hybrid_gateway.stores.breakers import BreakerSync
from hybrid_gateway.stores.health import StoreHealth, StoreListener
from hybrid_gateway.stores.limits import SharedRateLimiter
from hybrid_gateway.stores.outbox import Outbox
from hybrid_gateway.stores.redis_store import RedisStore
from hybrid_gateway.stores.settings import StoresConfig
from hybrid_gateway.stores.spend import SharedBudgetBook
from hybrid_gateway.tenancy.settings import BudgetConfig, LimitsConfig, TenantConfig

__all__ = ["SharedState", "build_shared_state"]

_log = logging.getLogger(__name__)


@dataclass(slots=True)
class SharedState:
    config: StoresConfig
    store: RedisStore
    health: StoreHealth
    outbox: Outbox
    clock: Clock
    breakers: BreakerSync
    wall: Callable[[], float] = time.time
    budgets: SharedBudgetBook | None = None
    _task: asyncio.Task[None] | None = field(default=None, init=False)

    def limiter(
        self, tenants: Mapping[str, TenantConfig], limits: LimitsConfig
    ) -> SharedRateLimiter:
        return SharedRateLimiter(
            {n: t.rate for n, t in tenants.items() if t.rate is not None}, limits.global_,
            self.store, self.outbox, fail_open=self.config.rate_limits_on_outage == "open",
            retry_s=self.config.retry_s,
        )  # fmt: skip

    def budget_book(self, budgets: Mapping[str, BudgetConfig]) -> SharedBudgetBook:
        self.budgets = SharedBudgetBook(budgets, self.store, self.wall)
        return self.budgets

    def exact_cache(self, *, ttl_s: float) -> SharedExactCache:
        return SharedExactCache(
            self.store, ttl_s=ttl_s, max_entry_bytes=self.config.max_entry_bytes,
            clock=self.clock, wall=self.wall,
        )  # fmt: skip

    def results_mirror(self) -> ResultsMirror:
        return ResultsMirror(self.store, self.outbox, self.clock, retry_s=self.health.retry_s)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def sync_once(self) -> None:
        if not self.health.up:
            with contextlib.suppress(StoreUnavailable):
                await self.store.ping()
        await self.breakers.sync()
        if self.budgets is not None:
            await self.budgets.sync()

    def status(self) -> dict[str, object]:
        """For ``/healthz``: backend, up/down, errors, debits waiting for the store."""
        body: dict[str, object] = {"backend": "redis", **self.health.status()}
        if self.budgets is not None:
            body["budget_debits_queued"] = self.budgets.queued
        return body

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with contextlib.suppress(StoreUnavailable):
            await self.sync_once()  # last budget debits and breaker counts
        await self.outbox.drain(timeout_s=2.0)
        await self.store.aclose()

    async def _loop(self) -> None:
        interval = self.config.sync_interval_ms / 1000
        while True:
            await self.clock.sleep(interval)
            try:
                await self.sync_once()
            except Exception:  # the loop must outlive any one bad sync
                _log.exception("shared-state sync failed")


def build_shared_state(
    config: StoresConfig,
    *,
    clock: Clock,
    breaker: BreakerSettings,
    listeners: Sequence[StoreListener] = (),
    wall: Callable[[], float] = time.time,
    source: str = "<config>",
) -> SharedState | None:
    if config.backend == "memory":
        return None
    health = StoreHealth(clock, retry_s=config.retry_s, listeners=listeners)
    try:
        store = RedisStore(
            config.redis_url, prefix=config.key_prefix, timeout_s=config.timeout_ms / 1000,
            health=health,
        )  # fmt: skip
    except ImportError as exc:
        raise ConfigError(
            source, "stores.backend", f"memory, or install the redis extra for redis ({exc})"
        ) from exc
    return SharedState(
        config=config, store=store, health=health, outbox=Outbox(), clock=clock,
        breakers=BreakerSync(store, breaker), wall=wall,
    )  # fmt: skip
