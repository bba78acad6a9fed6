"""The load generator: replays a workload through a gateway, one ``RequestResult`` per request.

It runs in its own process (``python -m hybrid_gateway.tools.bench.loadgen ...``) so it never
shares the gateway's event loop, and it only targets loopback hosts (exit 2 otherwise).

- ``--mode closed``: ``--concurrency`` workers; each takes the next item (cycling through the
  workload in file order from a start offset picked by ``--seed``), sends it, waits for the
  whole answer, records it and repeats until ``--duration`` is over; requests still in flight
  then finish and are recorded.
- ``--mode open``: each item (in arrival order, once) is sent at ``arrival_ms / --time-scale``
  after the start, never earlier, whatever is in flight, up to a safety cap of concurrent
  requests; items due after ``--duration`` are not sent.

Both stop after ``--max-requests`` when given.  Every request has the client timeout
``--timeout-s``.  A request succeeded when ``status == 200`` and ``error_code is None``:
``status`` is 0 when no response came (``connection_error``, ``client_timeout``), and a stream
that breaks after its headers keeps its status with ``error_code`` set (the gateway's error event
code, ``connection_error``, ``client_timeout`` or ``incomplete_stream`` when it ended without
``[DONE]``).  stdout gets one JSON line at the end: ``{"requests", "errors", "duration_s"}``.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from hybrid_gateway.serving import run_with_best_loop
from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.workload.schema import (
    WorkloadItem,
    parse_mark,
    read_workload,
    request_body,
)

MAX_IN_FLIGHT = 2000  # open mode's safety cap on concurrent requests
_PROGRESS_INTERVAL_S = 0.25
_COST_COMMENT = b": x-gateway-cost-usd="


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


@dataclass(slots=True)
class Answer:
    """What one response told us, filled in as it is read."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    text: str = ""
    error_code: str | None = None
    cost_usd: float | None = None
    ttft_ms: float | None = None


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


def parse_route(header: str | None) -> tuple[str | None, str | None, str | None]:
    """``lane=..; channel=..; rule=..`` -> (lane, channel, rule); missing parts are None."""
    fields: dict[str, str] = {}
    for part in (header or "").split(";"):
        key, sep, value = part.strip().partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    return fields.get("lane"), fields.get("channel"), fields.get("rule")


def parse_cost(value: str | None) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:  # "pending": a stream's cost comes at its end
        return None


def _error_code(raw: bytes) -> str | None:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None
    code = error.get("code") or error.get("type")
    return str(code) if code is not None else None


def _message_text(raw: bytes) -> str:
    try:
        body = orjson.loads(raw)
        content = body["choices"][0]["message"]["content"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


class Client:
    """Sends one workload item and turns its response into a ``RequestResult``."""

    def __init__(self, session: aiohttp.ClientSession, settings: LoadSettings) -> None:
        self._session = session
        self._settings = settings
        self._url = settings.base_url.rstrip("/") + "/chat/completions"

    async def send(self, item: WorkloadItem, stage_start: float) -> RequestResult:
        body = orjson.dumps(request_body(item, self._settings.model))
        sent = time.perf_counter()
        answer = Answer()
        try:
            async with asyncio.timeout(self._settings.timeout_s):
                await self._exchange(body, item.stream, sent, answer)
        except TimeoutError:
            answer.error_code = "client_timeout"
        except (aiohttp.ClientError, OSError):
            answer.error_code = "connection_error"
        latency_ms = (time.perf_counter() - sent) * 1000.0
        return _result(item, sent - stage_start, latency_ms, answer)

    async def _exchange(self, body: bytes, stream: bool, sent: float, answer: Answer) -> None:
        headers = {"Content-Type": "application/json"}
        async with self._session.post(self._url, data=body, headers=headers) as response:
            answer.status = response.status
            answer.headers = {k.lower(): v for k, v in response.headers.items()}
            answer.cost_usd = parse_cost(answer.headers.get("x-gateway-cost-usd"))
            if response.status != 200:
                answer.error_code = _error_code(await response.read())
            elif stream and response.content_type == "text/event-stream":
                await _read_stream(response, sent, answer)
            else:
                answer.text = _message_text(await response.read())


async def _read_stream(response: aiohttp.ClientResponse, sent: float, answer: Answer) -> None:
    """Concatenate the content deltas; note the first one's time, the cost and any error."""
    parts: list[str] = []
    done = False
    async for line in response.content:
        line = line.rstrip(b"\r\n")
        if line.startswith(_COST_COMMENT):
            answer.cost_usd = parse_cost(line[len(_COST_COMMENT) :].decode().strip())
        elif not line.startswith(b"data:"):
            continue
        elif (payload := line[5:].strip()) == b"[DONE]":
            done = True
        elif piece := _delta(payload, answer):
            if answer.ttft_ms is None:
                answer.ttft_ms = (time.perf_counter() - sent) * 1000.0
            parts.append(piece)
    answer.text = "".join(parts)
    if not done and answer.error_code is None:
        answer.error_code = "incomplete_stream"


def _delta(payload: bytes, answer: Answer) -> str:
    try:
        chunk = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(chunk, dict):
        return ""
    if isinstance(chunk.get("error"), dict):
        answer.error_code = _error_code(payload) or "stream_error"
        return ""
    try:
        content = chunk["choices"][0]["delta"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        return ""
    return content if isinstance(content, str) else ""


def _result(item: WorkloadItem, start_s: float, latency_ms: float, answer: Answer) -> RequestResult:
    lane, channel, rule = parse_route(answer.headers.get("x-gateway-route"))
    mark = parse_mark(answer.text)
    return RequestResult(
        item=item.id,
        start_s=round(start_s, 6),
        latency_ms=round(latency_ms, 3),
        ttft_ms=None if answer.ttft_ms is None else round(answer.ttft_ms, 3),
        status=answer.status,
        error_code=answer.error_code,
        stream=item.stream,
        lane=lane,
        channel=channel,
        rule=rule,
        cache=answer.headers.get("x-gateway-cache"),
        cost_usd=answer.cost_usd,
        mark_group=None if mark is None else mark[0],
        mark_ok=None if mark is None else mark[1],
        fallback=answer.headers.get("x-gateway-fallback"),
    )


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


async def run_open(stage: Stage, client: Client, recorder: Recorder) -> None:
    slots = asyncio.Semaphore(MAX_IN_FLIGHT)
    tasks: set[asyncio.Task[None]] = set()

    async def one(item: WorkloadItem) -> None:
        try:
            recorder.record(await client.send(item, stage.start))
        finally:
            slots.release()

    scale = stage.settings.time_scale
    for item in sorted(stage.items, key=lambda i: i.arrival_ms):
        due = item.arrival_ms / 1000.0 / scale
        if due >= stage.settings.duration_s:
            break
        while (wait := due - stage.elapsed()) > 0:  # loops until due: never early
            await asyncio.sleep(wait)
        if not stage.may_send():
            break
        await slots.acquire()
        stage.sent += 1
        task = asyncio.create_task(one(item))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)


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
            await runner(stage, Client(session, settings), recorder)
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
