"""Optional active health checks: ``GET <path>`` on every endpoint's origin each interval.

A 2xx passes (an ejected endpoint is taken back at once), anything else (status, refused
connection, no answer within ``timeout_s``) counts as one failure.  The loop starts with the
pool's first request (never at import or config time) and stops with the pool.
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
        self._endpoints = tuple(endpoints)
        self._config = config
        self._clock = clock
        self._pools = []
        self._requests = []
        for endpoint in self._endpoints:
            parts = urlsplit(endpoint.url)
            pool = Http1Pool(f"{parts.scheme}://{parts.netloc}", max_idle=1,
                             connect_timeout_s=config.timeout_s, ca_file=ca_file)  # fmt: skip
            self._pools.append(pool)
            self._requests.append(_get(config.path, pool.host_header, headers))
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
        for pool in self._pools:
            pool.close()

    async def check_all(self) -> None:
        """One round: every endpoint checked at once."""
        await asyncio.gather(*(self._check(i) for i in range(len(self._endpoints))))
        self.rounds += 1

    async def _run(self) -> None:
        while True:
            await self.check_all()
            await self._clock.sleep(self._config.interval_s)

    async def _check(self, i: int) -> None:
        pool, health = self._pools[i], self._endpoints[i].health
        try:
            async with asyncio.timeout(self._config.timeout_s):
                conn, head = await pool.send(self._requests[i])
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
