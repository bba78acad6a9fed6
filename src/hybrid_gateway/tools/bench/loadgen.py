"""The load generator: replays a workload through a gateway, one ``RequestResult`` per request.

It runs in its own process (``python -m hybrid_gateway.tools.bench.loadgen ...``) so it never
shares the gateway's event loop, and it only targets loopback hosts (exit 2 otherwise).

- ``--mode closed``: ``--concurrency`` workers; each takes the next item (cycling through the
  workload in file order from ``--start-offset``, or from an offset picked by ``--seed``), sends
  it, waits for the whole answer (``client.py``), records it and repeats until ``--duration`` is
  over; requests still in flight then finish and are recorded.
- ``--mode open``: each item (in arrival order, once) is sent at ``arrival_ms / --time-scale``
  after the start, never earlier, whatever is in flight, up to a safety cap of concurrent
  requests; items due after ``--duration`` are not sent.
- ``--mode open --rate R``: Poisson arrivals at ``R`` requests per second (exponential gaps
  drawn from ``random.Random(f"{seed}:arrivals")``), items taken in file order from
  ``--start-offset`` (wrapping) as in closed mode, whatever is in flight, up to the same cap;
  nothing is sent after ``--duration``.  One offered rate for every strategy: a faster one does
  not get more requests, as it would in a closed loop.

Both stop after ``--max-requests`` when given.  Every request has the client timeout
``--timeout-s``.  A request succeeded when ``status == 200`` and ``error_code is None``:
``status`` is 0 when no response came (``connection_error``, ``client_timeout``), and a stream
that breaks after its headers keeps its status with ``error_code`` set (the gateway's error event
code, ``connection_error``, ``client_timeout`` or ``incomplete_stream`` when it ended without
``[DONE]``).  stdout gets one JSON line at the end: ``{"requests", "errors", "duration_s",
"next_offset"}``, where ``next_offset`` is where a following run continues.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from hybrid_gateway.serving import run_with_best_loop
from hybrid_gateway.tools.bench.client import Client
from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.workload.schema import WorkloadItem, read_workload

MAX_IN_FLIGHT = 2000  # open mode's safety cap on concurrent requests
_PROGRESS_INTERVAL_S = 0.25


class UsageError(ValueError):
    """Bad arguments or an unusable target (exit 2)."""


@dataclass(frozen=True, slots=True)
class LoadSettings:
    base_url: str
    model: str
    mode: str  # "closed" or "open"
    concurrency: int
    duration_s: float
    max_requests: int | None
    timeout_s: float
    seed: int
    time_scale: float
    # Closed mode starts at this item (wrapping); None: an offset picked by ``seed``.  A bench
    # passes on the previous run's ``next_offset`` so stages never re-send what came before.
    start_offset: int | None = None
    # Open mode: Poisson arrivals at this many requests per second (None: the items' arrival_ms).
    rate: float | None = None


def check_loopback(base_url: str) -> None:
    """Accept only http(s) URLs on localhost or a loopback address."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        raise UsageError(f"--base-url must be an http(s) URL, not {base_url!r}")
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise UsageError(f"refusing to load {host!r}: load tests target loopback hosts only")


class Recorder:
    """Writes each result as a JSONL line at once and counts requests and errors."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self.requests = 0
        self.errors = 0

    def record(self, result: RequestResult) -> None:
        self._out.write(result.to_json() + b"\n")
        self.requests += 1
        self.errors += result.status != 200 or result.error_code is not None


class Stage:
    """One run: the clock, the stop conditions and the item order."""

    def __init__(self, settings: LoadSettings, items: Sequence[WorkloadItem]) -> None:
        self.settings = settings
        self.items = items
        self.start = time.perf_counter()
        self.sent = 0
        start = settings.start_offset
        if start is None:
            start = random.Random(settings.seed).randrange(len(items))
        self._cursor = start % len(items)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def may_send(self) -> bool:
        limit = self.settings.max_requests
        under_limit = limit is None or self.sent < limit
        return under_limit and self.elapsed() < self.settings.duration_s

    @property
    def next_offset(self) -> int:
        return self._cursor % len(self.items)

    def next_item(self) -> WorkloadItem:
        item = self.items[self._cursor % len(self.items)]
        self._cursor += 1
        return item


async def run_closed(stage: Stage, client: Client, recorder: Recorder) -> None:
    async def worker() -> None:
        while stage.may_send():
            stage.sent += 1
            recorder.record(await client.send(stage.next_item(), stage.start))

    await asyncio.gather(*(worker() for _ in range(stage.settings.concurrency)))


class _Launcher:
    """Open mode's sending side: each item at its due time, at most MAX_IN_FLIGHT at once."""

    def __init__(self, stage: Stage, client: Client, recorder: Recorder) -> None:
        self._stage, self._client, self._recorder = stage, client, recorder
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._tasks: set[asyncio.Task[None]] = set()

    async def send_at(self, due: float, item: Callable[[], WorkloadItem]) -> bool:
        """Send ``item()`` at ``due`` s after the start; False once the stage is over."""
        stage = self._stage
        if due >= stage.settings.duration_s:
            return False
        while (wait := due - stage.elapsed()) > 0:  # loops until due: never early
            await asyncio.sleep(wait)
        if not stage.may_send():
            return False
        await self._slots.acquire()
        stage.sent += 1
        task = asyncio.create_task(self._one(item()))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _one(self, item: WorkloadItem) -> None:
        try:
            self._recorder.record(await self._client.send(item, self._stage.start))
        finally:
            self._slots.release()

    async def drain(self) -> None:
        await asyncio.gather(*self._tasks)


async def run_open(stage: Stage, client: Client, recorder: Recorder) -> None:
    launcher = _Launcher(stage, client, recorder)
    rate = stage.settings.rate
    if rate is not None:
        arrivals = random.Random(f"{stage.settings.seed}:arrivals")
        due = 0.0
        while await launcher.send_at(due, stage.next_item):
            due += arrivals.expovariate(rate)
    else:
        scale = stage.settings.time_scale
        for item in sorted(stage.items, key=lambda i: i.arrival_ms):
            if not await launcher.send_at(item.arrival_ms / 1000.0 / scale, _given(item)):
                break
    await launcher.drain()


def _given(item: WorkloadItem) -> Callable[[], WorkloadItem]:
    return lambda: item


async def show_progress(stage: Stage, recorder: Recorder, stream: IO[str]) -> None:
    """Redraw one stderr line at most 4 times a second until cancelled."""
    try:
        while True:
            await asyncio.sleep(_PROGRESS_INTERVAL_S)
            _draw(stage, recorder, stream)
    finally:
        _draw(stage, recorder, stream)
        stream.write("\n")
        stream.flush()


def _draw(stage: Stage, recorder: Recorder, stream: IO[str]) -> None:
    elapsed = stage.elapsed()
    rps = recorder.requests / elapsed if elapsed > 0 else 0.0
    in_flight = stage.sent - recorder.requests
    stream.write(
        f"\r{elapsed:6.1f}/{stage.settings.duration_s:g} s  {recorder.requests} done  "
        f"{in_flight} in flight  {rps:7.1f} rps  {recorder.errors} errors "
    )
    stream.flush()


async def run_load(
    settings: LoadSettings,
    items: Sequence[WorkloadItem],
    out: IO[bytes],
    progress: IO[str] | None = None,
) -> dict[str, Any]:
    """Run one stage, writing results to ``out``; returns the summary."""
    check_loopback(settings.base_url)
    if not items:
        raise UsageError("the workload has no items")
    recorder = Recorder(out)
    limit = settings.concurrency if settings.mode == "closed" else MAX_IN_FLIGHT
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, ttl_dns_cache=None)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=settings.timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        stage = Stage(settings, items)
        runner: Callable[[Stage, Client, Recorder], Any] = (
            run_closed if settings.mode == "closed" else run_open
        )
        display = None
        if progress is not None:
            display = asyncio.create_task(show_progress(stage, recorder, progress))
        try:
            await runner(
                stage,
                Client(session, settings.base_url, settings.model, settings.timeout_s),
                recorder,
            )
        finally:
            if display is not None:
                display.cancel()
                await asyncio.gather(display, return_exceptions=True)
        elapsed = stage.elapsed()
    out.flush()
    stopped_by_time = stage.sent == 0 or elapsed >= settings.duration_s
    duration = settings.duration_s if stopped_by_time else elapsed
    return {
        "requests": recorder.requests,
        "errors": recorder.errors,
        "duration_s": round(duration, 3),
        "next_offset": stage.next_offset,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m hybrid_gateway.tools.bench.loadgen",
        description="Replay a workload through a gateway on loopback; one JSONL line a request.",
    )
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--workload", type=Path, required=True)
    parser.add_argument("--model", default="auto")
    parser.add_argument("--out", type=Path, required=True, help="results JSONL")
    parser.add_argument("--mode", choices=("closed", "open"), default="closed")
    parser.add_argument("--concurrency", type=int, default=10, help="closed mode's workers")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds")
    parser.add_argument("--max-requests", type=int)
    parser.add_argument("--timeout-s", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--start-offset", type=int, help="closed mode: first item index (default: from --seed)"
    )
    parser.add_argument("--time-scale", type=float, default=1.0, help="open mode's speed-up")
    parser.add_argument(
        "--rate", type=float, help="open mode: Poisson arrivals at this many requests/s"
    )
    parser.add_argument("--progress", action="store_true", help="a progress line on stderr")
    return parser


def settings_from_args(args: argparse.Namespace) -> LoadSettings:
    check_loopback(args.base_url)
    checks = [
        (args.concurrency >= 1, "--concurrency must be >= 1"),
        (args.duration > 0, "--duration must be > 0"),
        (args.max_requests is None or args.max_requests >= 1, "--max-requests must be >= 1"),
        (args.timeout_s > 0, "--timeout-s must be > 0"),
        (args.time_scale > 0, "--time-scale must be > 0"),
        (args.start_offset is None or args.start_offset >= 0, "--start-offset must be >= 0"),
        (args.rate is None or args.rate > 0, "--rate must be > 0"),
        (args.rate is None or args.mode == "open", "--rate needs --mode open"),
    ]
    for ok, message in checks:
        if not ok:
            raise UsageError(message)
    return LoadSettings(
        base_url=args.base_url,
        model=args.model,
        mode=args.mode,
        concurrency=args.concurrency,
        duration_s=args.duration,
        max_requests=args.max_requests,
        timeout_s=args.timeout_s,
        seed=args.seed,
        time_scale=args.time_scale,
        start_offset=args.start_offset,
        rate=args.rate,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = settings_from_args(args)
        items = read_workload(args.workload)
    except (UsageError, OSError, ValueError, TypeError, KeyError) as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return 2
    summary: dict[str, Any] = {}

    async def go() -> None:
        with args.out.open("wb") as out:
            progress = sys.stderr if args.progress else None
            summary.update(await run_load(settings, items, out, progress))

    try:
        run_with_best_loop(go())
    except UsageError as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return 2
    print(orjson.dumps(summary).decode(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
