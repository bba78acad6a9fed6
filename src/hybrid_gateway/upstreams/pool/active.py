"""Optional active health checks: ``GET <path>`` on every endpoint's origin each interval.

A 2xx passes (an ejected endpoint is taken back at once), anything else (status, refused
connection, no answer within ``timeout_s``) counts as one failure.  The loop starts with the
pool's first request (never at import or config time) and stops with the pool.  A reload that
changes the endpoints (``replace``) checks the new set from the next round; a removed
endpoint's check pool closes once no check of it is under way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.upstreams.http1 import Http1Error, Http1Pool
from hybrid_gateway.upstreams.pool.endpoint import Endpoint
from hybrid_gateway.upstreams.pool.settings import ActiveCheckConfig

__all__ = ["ActiveChecks"]


class _Target:
    """One endpoint's checks: its own small connection pool and the request bytes."""

    __slots__ = ("endpoint", "pool", "request")

    def __init__(self, endpoint: Endpoint, config: ActiveCheckConfig, headers: Mapping[str, str],
                 ca_file: str | None) -> None:  # fmt: skip
        parts = urlsplit(endpoint.url)
        self.endpoint = endpoint
        self.pool = Http1Pool(f"{parts.scheme}://{parts.netloc}", max_idle=1,
                              connect_timeout_s=config.timeout_s, ca_file=ca_file)  # fmt: skip
        self.request = _get(config.path, self.pool.host_header, headers)


class ActiveChecks:
    def __init__(
        self,
        endpoints: Sequence[Endpoint],
        config: ActiveCheckConfig,
        clock: Clock,
        *,
        headers: Mapping[str, str],
        ca_file: str | None = None,
    ) -> None:
        self._config = config
        self._clock = clock
        self._headers, self._ca_file = dict(headers), ca_file
        self._targets = [self._target(e) for e in endpoints]
        # pools of endpoints a reload removed, closed once no check of theirs is under way
        self._retired: list[Http1Pool] = []
        self._checking = False
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for pool in [*(t.pool for t in self._targets), *self._retired]:
            pool.close()

    def replace(self, endpoints: Sequence[Endpoint]) -> None:
        """A reload changed the endpoints: check these from the next round on."""
        kept: dict[int, _Target | None] = {id(t.endpoint): t for t in self._targets}
        self._targets = [kept.pop(id(e), None) or self._target(e) for e in endpoints]
        self._retired.extend(t.pool for t in kept.values() if t is not None)
        if not self._checking:
            self._close_retired()

    def _target(self, endpoint: Endpoint) -> _Target:
        return _Target(endpoint, self._config, self._headers, self._ca_file)

    async def check_all(self) -> None:
        """One round: every endpoint checked at once."""
        self._checking = True
        try:
            await asyncio.gather(*map(self._check, self._targets))
        finally:
            self._checking = False
            self._close_retired()
        self.rounds += 1

    def _close_retired(self) -> None:
        while self._retired:
            self._retired.pop().close()

    async def _run(self) -> None:
        while True:
            await self.check_all()
            await self._clock.sleep(self._config.interval_s)

    async def _check(self, target: _Target) -> None:
        pool, health = target.pool, target.endpoint.health
        try:
            async with asyncio.timeout(self._config.timeout_s):
                conn, head = await pool.send(target.request)
                try:
                    await conn.read()
                finally:
                    pool.release(conn)
        except (TimeoutError, Http1Error):
            health.check_failed()
            return
        if 200 <= head.status < 300:
            health.check_passed()
        else:
            health.check_failed()


def _get(path: str, host: str, headers: Mapping[str, str]) -> bytes:
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Accept: application/json"]
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
