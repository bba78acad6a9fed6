"""`bench soak` start to finish: the stack, the traffic and the sampling, the settle, the report.

After the traffic stops, the run waits for the gateway to settle and looks once more: no
upstream request may still be running at the emulators (a hang-up that did not cancel its
upstream would leave one), and every upstream socket the gateway holds must be idle in a
keep-alive pool (one that is not is a leaked connection).  Exit code 0 when nothing grows and
nothing leaked, 1 otherwise, 2 when the run itself broke.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime
from typing import Any

import aiohttp

from hybrid_gateway.tools.cliargs import sigterm_stops_the_run
from hybrid_gateway.tools.processes import ProcessStartError
from hybrid_gateway.tools.soak.analysis import SERIES, fit_trend
from hybrid_gateway.tools.soak.cli import warmup_s
from hybrid_gateway.tools.soak.report import SCHEMA, markdown, write_report
from hybrid_gateway.tools.soak.sampler import Sample, Sampler
from hybrid_gateway.tools.soak.stack import SoakStack, start_stack
from hybrid_gateway.tools.soak.traffic import Traffic

__all__ = ["main", "run_soak"]

_SETTLE_S = 3.0  # after the last request, before the settled look
_TASKS_SLACK = 10  # background tasks a settled gateway may hold beyond its idle count


def main(args: argparse.Namespace) -> int:
    started = datetime.now(UTC)
    run_dir = args.out.resolve() / f"soak-{started:%Y%m%d-%H%M%S}"
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        with sigterm_stops_the_run(), start_stack(args, run_dir) as stack:
            measured = asyncio.run(run_soak(args, stack))
    except (ProcessStartError, OSError, aiohttp.ClientError) as exc:
        print(f"bench soak: the run broke: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench soak: interrupted; every process it started is stopped", file=sys.stderr)
        return 130
    report = build_report(args, started, measured)
    paths = write_report(report, args.out, run_dir.name, plots=not args.no_plots)
    print(markdown(report))
    for path in paths:
        print(f"wrote {path}")
    return 0 if report["passed"] else 1


async def run_soak(args: argparse.Namespace, stack: SoakStack) -> dict[str, Any]:
    """Traffic for ``args.duration`` seconds with a sample every ``args.interval``.

    The sampler has its own session: the settled look comes after the traffic's connections
    are closed, so the gateway's per-connection handler tasks are gone too.
    """
    base = stack.gateway.url
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as probe:
        sampler = Sampler(probe, stack.gateway.pid, base + "/metrics", stack.upstream_ports)
        before = await sampler.sample(0.0, 0, 0)
        t0 = time.monotonic()
        connector = aiohttp.TCPConnector(limit=args.concurrency)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            traffic = Traffic(session, base, args.seed)
            samples = await _drive(args, traffic, sampler, t0)
        traffic_s = time.monotonic() - t0
        await asyncio.sleep(_SETTLE_S)
        settled = await sampler.sample(time.monotonic() - t0, 0, traffic.counts.total)
        in_flight = await _upstream_in_flight(probe, stack)
    return {
        "before": before, "samples": samples, "settled": settled,
        "upstream_in_flight": in_flight, "traffic_s": traffic_s, "counts": traffic.counts,
    }  # fmt: skip


async def _drive(
    args: argparse.Namespace, traffic: Traffic, sampler: Sampler, t0: float
) -> list[Sample]:
    stop = asyncio.Event()
    workers = [asyncio.create_task(traffic.worker(stop)) for _ in range(args.concurrency)]
    samples: list[Sample] = []
    try:
        while (elapsed := time.monotonic() - t0) < args.duration:
            counts = traffic.counts
            samples.append(await sampler.sample(elapsed, counts.in_flight, counts.total))
            await asyncio.sleep(min(args.interval, max(0.0, args.duration - elapsed)))
    finally:
        stop.set()
        await asyncio.gather(*workers)
    return samples


async def _upstream_in_flight(session: aiohttp.ClientSession, stack: SoakStack) -> int:
    """Requests still running or queued at the emulators' engines."""
    total = 0
    for process in stack.emulators.values():
        async with session.get(process.url + "/stats") as response:
            stats = await response.json()
        total += int(stats["running"]) + int(stats["waiting"])
    return total


def build_report(
    args: argparse.Namespace, started: datetime, measured: dict[str, Any]
) -> dict[str, Any]:
    samples: list[Sample] = measured["samples"]
    warmup = warmup_s(args)
    fitted = [s for s in samples if s.t_s >= warmup]
    trends = {
        name: fit_trend(
            name, [s.t_s for s in fitted], [float(getattr(s, name)) for s in fitted], tolerance
        ).as_dict()
        for name, tolerance in SERIES.items()
    }
    settled: Sample = measured["settled"]
    before: Sample = measured["before"]
    leaked = max(0, settled.upstream_connections - settled.upstream_idle)
    leaked += settled.upstream_close_wait
    checks = {
        "upstream_in_flight": measured["upstream_in_flight"],
        "leaked_connections": leaked,
        "upstream_connections": settled.upstream_connections,
        "upstream_idle": settled.upstream_idle,
        "upstream_close_wait": settled.upstream_close_wait,
        "tasks": settled.tasks,
        "tasks_before": before.tasks,
        "rss_mib": settled.rss_mib,
        "fds": settled.fds,
    }
    passed = (
        not any(t["grows"] for t in trends.values())
        and leaked == 0
        and measured["upstream_in_flight"] == 0
        and settled.tasks <= before.tasks + _TASKS_SLACK
    )
    counts = measured["counts"]
    return {
        "schema": SCHEMA,
        "started_at": f"{started:%Y-%m-%dT%H:%M:%SZ}",
        "finished_at": f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}",
        "argv": list(sys.argv),
        "settings": {
            "duration_s": args.duration, "warmup_s": warmup, "interval_s": args.interval,
            "concurrency": args.concurrency, "seed": args.seed,
        },
        "requests": {
            "total": counts.total, "per_s": counts.total / max(measured["traffic_s"], 1e-9),
            "by_kind": counts.as_dict(),
        },
        "trends": trends,
        "settled": checks,
        "passed": passed,
        "samples": [s.as_dict() for s in samples],
    }  # fmt: skip
