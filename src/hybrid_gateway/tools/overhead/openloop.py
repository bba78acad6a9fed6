"""An open-loop load at a fixed rate: what latency a target adds when it is not saturated.

wrk is closed-loop (a connection sends its next request when the previous one answers), so
its latencies at a concurrency say how a saturated target queues.  The goal "p99 added at an
offered 100 requests/s" needs the other kind: requests sent on a fixed schedule, whatever the
target does, each latency counted from the moment it was *due* (a late send is the target's
delay too, so coordinated omission cannot hide a stall).  The schedule runs in this process on
its own event loop; at 100 requests/s it costs a few percent of one core.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

import aiohttp
import orjson

from hybrid_gateway.tools.overhead.prompts import prompt_text
from hybrid_gateway.tools.overhead.wrk import CHAT_PATH

__all__ = ["OpenLoopResult", "percentile", "run_open_loop"]


@dataclass(frozen=True)
class OpenLoopResult:
    rate: float
    duration_s: float
    sent: int
    errors: int
    p50_ms: float
    p99_ms: float
    max_ms: float

    def to_json(self) -> dict[str, object]:
        return {
            "rate": self.rate,
            "duration_s": self.duration_s,
            "sent": self.sent,
            "errors": self.errors,
            "p50_ms": round(self.p50_ms, 3),
            "p99_ms": round(self.p99_ms, 3),
            "max_ms": round(self.max_ms, 3),
        }


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0-100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def run_open_loop(
    url: str, rate: float, duration_s: float, prompt: str, warmup_s: float = 0.0
) -> OpenLoopResult:
    """Send ``rate`` requests/s of kind ``prompt`` to ``url`` for ``warmup_s`` + ``duration_s``
    seconds; the figures count the last ``duration_s`` only.  The warm-up opens the client's
    connections at the rate it needs them, as wrk's levels are warmed up: without it the first
    requests of a run each waited for a new connection, and the first 3-6 of 800 were the
    slowest of the run, against one target as much as the other."""
    return asyncio.run(_run(url, rate, duration_s, prompt, warmup_s))


async def _run(
    url: str, rate: float, duration_s: float, prompt: str, warmup_s: float
) -> OpenLoopResult:
    token = uuid.uuid4().hex[:12]
    latencies: list[float] = []
    errors = 0
    warm = int(rate * warmup_s)  # the first ``warm`` requests are not counted
    measured = int(rate * duration_s)
    total = warm + measured
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=30)

    async def one(session: aiohttp.ClientSession, n: int, due: float) -> None:
        nonlocal errors
        text = prompt_text(prompt, f"{token}-0-{n}", n)
        body = {"model": "auto", "messages": [{"role": "user", "content": text}],
                "max_tokens": 16}  # fmt: skip
        headers = {"Content-Type": "application/json"}
        counted = n > warm
        try:
            async with session.post(url + CHAT_PATH, data=orjson.dumps(body),
                                    headers=headers) as resp:  # fmt: skip
                await resp.read()
                if resp.status >= 400:
                    errors += counted
                    return
        except (aiohttp.ClientError, TimeoutError):
            errors += counted
            return
        if counted:
            latencies.append((time.perf_counter() - due) * 1000)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter() + 0.05
        tasks = []
        for n in range(1, total + 1):
            due = start + (n - 1) / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(session, n, due)))
        await asyncio.gather(*tasks)
    return OpenLoopResult(rate, duration_s, measured, errors, percentile(latencies, 50),
                          percentile(latencies, 99), max(latencies, default=0.0))  # fmt: skip
