"""`hybrid-gateway bench scale-out`: 1 vs 2 worker processes, and what Redis costs a request.

Four gateway set-ups are driven by wrk with unique (cache-missing) chat requests against one
zero-delay emulator, all in this run, so only ratios between them are compared:

    memory-1w   stores.backend memory, 1 process   (the baseline)
    memory-2w   stores.backend memory, serve --workers 2
    redis-1w    stores.backend redis, 1 process    (per request: a rate-limit Lua take, an
                                                    exact-cache GET and SET, a queued budget debit)
    redis-2w    stores.backend redis, serve --workers 2

Reported: requests/s, latency percentiles, gateway CPU per request (parent and workers
together) and Redis CPU per request; then the ratios 2w/1w and redis/memory.  A direct probe
times one ``RedisStore.take`` round trip against ``MemoryStore.take`` in-process.  Redis is a
private ``redis-server`` on a free port (nothing persisted), unless ``--redis-url`` is given.
Writes ``scale-out-<stamp>.json`` and ``.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from hybrid_gateway.resilience.clock import MonotonicClock
from hybrid_gateway.stores.base import BucketSpec
from hybrid_gateway.stores.health import StoreHealth
from hybrid_gateway.stores.memory import MemoryStore
from hybrid_gateway.stores.redis_store import RedisStore
from hybrid_gateway.tools.overhead.wrk import WRK_INSTALL_HINT, WrkRun, find_wrk, run_wrk
from hybrid_gateway.tools.processes import python_module_argv, start_process, stop_process

__all__ = ["add_arguments", "run"]

SETUPS = (("memory-1w", "memory", 1), ("memory-2w", "memory", 2),
          ("redis-1w", "redis", 1), ("redis-2w", "redis", 2))  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--duration", type=int, default=10, help="seconds per set-up")
    parser.add_argument("--warmup", type=int, default=2, help="seconds of warm-up per set-up")
    parser.add_argument("--concurrency", type=int, default=32, help="wrk connections")
    parser.add_argument("--redis-url", help="an existing Redis (default: a private one)")
    parser.add_argument("--probe-calls", type=int, default=2000, help="round trips timed")


def run(args: argparse.Namespace) -> int:
    wrk = find_wrk()
    if wrk is None:
        print(WRK_INSTALL_HINT, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="hgw-scale-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        redis_url, redis_pid = args.redis_url, None
        if redis_url is None:
            redis_url, redis_pid = _private_redis(work, stack)
        argv = python_module_argv(
            "hybrid_gateway.cli", "emulate", "--zero-delay", "--host", "127.0.0.1", "--port", "0"
        )
        emulator = start_process("emulator", argv, work / "logs", 30)
        stack.callback(stop_process, emulator)
        rows = [
            _measure(args, wrk, work, name, backend, workers, emulator.url, redis_url, redis_pid)
            for name, backend, workers in SETUPS
        ]
        probe = asyncio.run(_probe(redis_url, args.probe_calls))
    report = _report(args, rows, probe)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"scale-out-{stamp}.json").write_text(json.dumps(report, indent=2) + "\n")
    markdown = _markdown(report)
    (args.out / f"scale-out-{stamp}.md").write_text(markdown)
    print(markdown)
    return 0


def _private_redis(work: Path, stack: contextlib.ExitStack) -> tuple[str, int]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found: install it or pass --redis-url")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(work)], stdout=subprocess.DEVNULL,
    )  # fmt: skip
    stack.callback(process.wait)
    stack.callback(process.kill)
    for _ in range(200):
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return f"redis://127.0.0.1:{port}/0", process.pid
        time.sleep(0.05)
    raise SystemExit("redis-server did not start")


def _config(backend: str, emulator_url: str, redis_url: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": 0, "request_log": {"enabled": False}},
        "channels": {"fast": {"base_url": emulator_url + "/v1", "model": "bench-model"}},
        "lanes": {"fast": {"channel": "fast"}},
        "models": [{"id": "auto"}],
        "routing": {"default_lane": "fast"},
        "cache": {"exact": {"enabled": True}},
        # Limits high enough never to refuse: the point is the cost of checking them.
        "tenants": {"default": {"rate": {"requests_per_s": 1e6, "burst": 1_000_000},
                                "budget": {"daily": 1e9}}},
    }  # fmt: skip
    if backend == "redis":
        config["stores"] = {"backend": "redis", "redis_url": redis_url,
                            "key_prefix": f"bench:{uuid.uuid4().hex[:8]}:"}  # fmt: skip
    return config


def _measure(
    args: argparse.Namespace, wrk: str, work: Path, name: str, backend: str, workers: int,
    emulator_url: str, redis_url: str, redis_pid: int | None,
) -> dict[str, Any]:  # fmt: skip
    folder = work / name
    folder.mkdir()
    path = folder / "gateway.yaml"
    path.write_text(yaml.safe_dump(_config(backend, emulator_url, redis_url)))
    argv = python_module_argv("hybrid_gateway.cli", "serve", "--config", str(path),
                              "--workers", str(workers))  # fmt: skip
    gateway = start_process(name, argv, work / "logs", 60)
    try:
        if args.warmup > 0:
            run_wrk(wrk, WrkRun(gateway.url, args.concurrency, args.warmup), work / "lua")
        pids = _tree(gateway.pid)
        before = _cpu(pids), _cpu([redis_pid] if redis_pid else [])
        load = run_wrk(wrk, WrkRun(gateway.url, args.concurrency, args.duration), work / "lua")
        after = _cpu(pids), _cpu([redis_pid] if redis_pid else [])
    finally:
        stop_process(gateway)
    requests = max(1, load.requests)
    row = {
        "setup": name, "backend": backend, "workers": workers, "requests": load.requests,
        "errors": load.errors, "rps": round(load.requests / load.duration_s, 1),
        "p50_ms": load.p50_ms, "p99_ms": load.p99_ms,
        "gateway_cpu_us_per_request": round((after[0] - before[0]) / requests * 1e6, 1),
        "redis_cpu_us_per_request": round((after[1] - before[1]) / requests * 1e6, 1),
    }  # fmt: skip
    print(json.dumps(row), file=sys.stderr)
    return row


def _tree(pid: int) -> list[int]:
    import psutil

    parent = psutil.Process(pid)
    return [pid, *(child.pid for child in parent.children(recursive=True))]


def _cpu(pids: list[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
    return total


async def _probe(redis_url: str, calls: int) -> dict[str, float]:
    """Microseconds per ``take`` (one Lua round trip) on Redis and on the memory store."""
    clock = MonotonicClock()
    health = StoreHealth(clock, retry_s=1.0)
    redis_store = RedisStore(redis_url, prefix=f"probe:{uuid.uuid4().hex[:8]}:", timeout_s=2.0,
                             health=health)  # fmt: skip
    spec = [BucketSpec("rate:probe", 1e9, 1e9, 1.0)]
    out = {}
    for name, store in (("redis", redis_store), ("memory", MemoryStore(clock))):
        await store.take(spec)
        started = time.perf_counter()
        for _ in range(calls):
            await store.take(spec)
        out[f"{name}_take_us"] = round((time.perf_counter() - started) / calls * 1e6, 1)
    await redis_store.aclose()
    return out


def _report(
    args: argparse.Namespace, rows: list[dict[str, Any]], probe: dict[str, float]
) -> dict[str, Any]:
    by = {row["setup"]: row for row in rows}

    def ratio(a: str, b: str, key: str) -> float:
        return round(by[a][key] / by[b][key], 3) if by[b][key] else 0.0

    return {
        "bench": "scale-out",
        "command": "hybrid-gateway bench scale-out " + " ".join(sys.argv[3:]),
        "settings": {"duration_s": args.duration, "concurrency": args.concurrency},
        "results": rows,
        "ratios": {
            "rps_2w_over_1w_memory": ratio("memory-2w", "memory-1w", "rps"),
            "rps_2w_over_1w_redis": ratio("redis-2w", "redis-1w", "rps"),
            "rps_redis_over_memory_1w": ratio("redis-1w", "memory-1w", "rps"),
            "gateway_cpu_redis_over_memory_1w": ratio(
                "redis-1w", "memory-1w", "gateway_cpu_us_per_request"
            ),
        },
        "redis_cost_per_request_us": {
            "gateway_cpu_extra": _diff(by, "gateway_cpu_us_per_request", 1),
            "redis_server_cpu": by["redis-1w"]["redis_cpu_us_per_request"],
            "p50_latency_extra_ms": _diff(by, "p50_ms", 3),
        },
        "probe": probe,
        "cpus": _cpus(),
    }


def _diff(by: dict[str, dict[str, Any]], key: str, digits: int) -> float:
    """redis-1w minus memory-1w."""
    return round(float(by["redis-1w"][key]) - float(by["memory-1w"][key]), digits)


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


def _markdown(report: dict[str, Any]) -> str:
    lines = ["# bench scale-out", "", f"`{report['command']}` on {report['cpus']} CPUs", "",
             "| setup | req/s | p50 ms | p99 ms | gateway CPU us/req | Redis CPU us/req | errors |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in report["results"]:
        lines.append(
            f"| {r['setup']} | {r['rps']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
            f"{r['gateway_cpu_us_per_request']} | {r['redis_cpu_us_per_request']} | {r['errors']} |"
        )
    lines += ["", "| ratio | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in report["ratios"].items()]
    lines += ["", "Redis cost per request:", ""]
    lines += [f"- {k}: {v}" for k, v in report["redis_cost_per_request_us"].items()]
    lines += [f"- probe {k}: {v}" for k, v in report["probe"].items()]
    return "\n".join(lines) + "\n"
