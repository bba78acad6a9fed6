"""What a leak would grow, read from outside the gateway every few seconds.

RSS and open file descriptors come from the OS (``/proc`` via psutil), the upstream sockets
from the gateway's TCP table (ESTABLISHED to an emulator port; CLOSE_WAIT ones too, which a
connection dropped by the upstream but never closed by us would leave), and the asyncio task
count and pooled idle connections from its ``/metrics`` gauges.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

__all__ = ["Sample", "Sampler"]

_MIB = 1024 * 1024


@dataclass(frozen=True)
class Sample:
    t_s: float
    rss_mib: float
    fds: int
    tasks: int
    upstream_connections: int  # ESTABLISHED to an upstream port
    upstream_idle: int  # of those, idle in the gateway's keep-alive pools
    upstream_close_wait: int
    in_flight: int  # requests the soak client had open
    requests: int  # answered so far

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Sampler:
    def __init__(
        self, session: aiohttp.ClientSession, pid: int, metrics_url: str, ports: frozenset[int]
    ) -> None:
        import psutil  # the bench extra; imported here so the CLI starts without it

        self._process = psutil.Process(pid)
        self._session = session
        self._metrics_url = metrics_url
        self._ports = ports

    async def sample(self, t_s: float, in_flight: int, requests: int) -> Sample:
        import psutil

        gauges = await self._gauges()
        try:
            established, close_wait = self._sockets()
            rss, fds = self._process.memory_info().rss, self._process.num_fds()
        except psutil.Error as exc:  # the gateway died: the run is broken, not failed
            raise ProcessLookupError(f"gateway pid {self._process.pid}: {exc}") from None
        return Sample(
            t_s=round(t_s, 3),
            rss_mib=round(rss / _MIB, 3),
            fds=fds,
            tasks=int(gauges.get("hybrid_gateway_asyncio_tasks", -1)),
            upstream_connections=established,
            upstream_idle=int(gauges.get("hybrid_gateway_upstream_idle_connections", 0)),
            upstream_close_wait=close_wait,
            in_flight=in_flight,
            requests=requests,
        )

    def _sockets(self) -> tuple[int, int]:
        import psutil

        established = close_wait = 0
        for conn in self._process.net_connections(kind="tcp"):
            if not conn.raddr or conn.raddr.port not in self._ports:
                continue
            if conn.status == psutil.CONN_ESTABLISHED:
                established += 1
            elif conn.status == psutil.CONN_CLOSE_WAIT:
                close_wait += 1
        return established, close_wait

    async def _gauges(self) -> dict[str, float]:
        """The two leak-watch gauges, summed over their labels."""
        async with self._session.get(self._metrics_url) as response:
            text = await response.text()
        out: dict[str, float] = {}
        for line in text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in ("hybrid_gateway_asyncio_tasks", "hybrid_gateway_upstream_idle_connections"):
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        return out
