"""One strategy's stages in `bench run`: the load generator per stage, and the open-loop rate.

The stages of a strategy run in order on the same processes: the closed-loop stages (``c20``,
``c50``, ...) first, then the open-loop stage (``open``).  Each stage has a discarded warm-up
and a measured run of the load generator in its own process, while the gateway's CPU and RSS
are sampled.  The open-loop stage offers one Poisson rate to every strategy: ``--rate``, or
by default the rate heavy-only sustained at the highest concurrency of the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from hybrid_gateway.tools.bench.report import StageRun
from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.bench.stats import stage_span_s
from hybrid_gateway.tools.overhead.procstat import ProcessSampler
from hybrid_gateway.tools.processes import ManagedProcess, python_module_argv

__all__ = [
    "BASELINE",
    "BenchError",
    "Replay",
    "StageSpec",
    "first_sends",
    "loadgen_args",
    "read_results",
    "run_stage",
    "stage_specs",
    "sustained_rate",
]

BASELINE = "heavy-only"  # whose closed-loop rate the open-loop stage offers by default
_LOADGEN = "hybrid_gateway.tools.bench.loadgen"
_MARGIN_S = 120.0  # how long past its --duration a load generator may run before we kill it


class BenchError(RuntimeError):
    """The run broke: a process died, the load generator failed, a file is unreadable."""


@dataclass(frozen=True, slots=True)
class StageSpec:
    """One stage: ``c<N>`` (closed loop, N clients) or ``open`` (Poisson at ``rate``)."""

    label: str
    concurrency: int | None
    mode: str  # "closed" or "open"
    rate: float | None = None  # open: requests/s (None: the workload's own arrival times)


@dataclass(frozen=True, slots=True)
class Stretch:
    """The items one stage replays when every strategy's stage replays the same ones."""

    warmup_start: int
    warmup_cap: int
    start: int


@dataclass(slots=True)
class Replay:
    """Where one gateway's replay stands: the next workload item, and the ids already sent.

    With ``stretches`` (``aligned_stretches``) stage k replays its own fixed stretch.  Without,
    warm-up and stages continue through the workload in order, so a stage re-sends an item only
    once the whole workload has gone by (counted as ``resent_share`` in the report).
    """

    offset: int = 0
    sent: set[str] = field(default_factory=set)
    stretches: Sequence[Stretch] | None = None
    stage: int = 0  # stages run so far


def aligned_stretches(args: argparse.Namespace, stages: int, items: int) -> list[Stretch] | None:
    """With ``--max-requests N``, every strategy's stage k replays the same items: its warm-up
    sends at most W = ceil(N * warmup / duration) of them from k * (N + W), its measured part
    starts at k * (N + W) + W (a slower strategy sends a shorter prefix of the same stretch).
    None without a cap, or when the workload holds fewer than stages * (N + W) items: then each
    stage continues where the strategy's previous one stopped, and strategies whose closed
    loops ran at different speeds replay different stretches (the report warns)."""
    cap = args.max_requests
    if cap is None:
        return None
    warm = -(-cap * args.warmup // args.duration) if args.warmup > 0 else 0
    stride = cap + int(warm)
    if stages * stride > items:
        return None
    return [Stretch(k * stride, int(warm), k * stride + int(warm)) for k in range(stages)]


def stage_specs(args: argparse.Namespace) -> list[StageSpec]:
    """The closed-loop stages then the open one, as ``--mode`` asks (the rate comes later)."""
    closed = [StageSpec(f"c{conc}", conc, "closed") for conc in args.concurrency]
    opened = [StageSpec("open", None, "open", args.rate)]
    return {"closed": closed, "open": opened, "both": [*closed, *opened]}[args.mode]


def sustained_rate(stages: Sequence[StageRun]) -> float | None:
    """Requests per second over the highest-concurrency closed-loop stage (None: none ran)."""
    closed = [s for s in stages if s.concurrency is not None and s.results]
    if not closed:
        return None
    top = max(closed, key=lambda s: s.concurrency or 0)
    value = top.loadgen.get("duration_s")
    reported = float(value) if isinstance(value, int | float) else 0.0
    span = max(reported, stage_span_s(top.results) or 0.0)
    return len(top.results) / span if span > 0 else None


def run_stage(
    args: argparse.Namespace,
    workload: Path,
    folder: Path,
    strategy: str,
    spec: StageSpec,
    gateway: ManagedProcess,
    processes: Sequence[ManagedProcess],
    replay: Replay,
) -> StageRun:
    sent = replay.sent
    stretch = replay.stretches[replay.stage] if replay.stretches is not None else None
    replay.stage += 1
    if args.warmup > 0:
        start, cap = (
            (replay.offset, None) if stretch is None else (stretch.warmup_start, stretch.warmup_cap)
        )
        warmup = loadgen_args(args, workload, gateway.url, spec, args.warmup, start, cap)
        warm = folder / f"{spec.label}-warmup.jsonl"
        replay.offset = _loadgen(warmup, warm, args.warmup).get("next_offset", replay.offset)
        sent.update(r.item for r in read_results(warm))
    if stretch is not None:
        replay.offset = stretch.start
    out = folder / f"{spec.label}.jsonl"
    measured = loadgen_args(args, workload, gateway.url, spec, args.duration, replay.offset)
    with ProcessSampler(gateway.pid) as sampler:
        summary = _loadgen(measured, out, args.duration)
    replay.offset = summary.get("next_offset", replay.offset)
    for proc in processes:
        if proc.popen.poll() is not None:
            raise BenchError(
                f"{proc.name} exited with code {proc.popen.returncode} in {spec.label}"
            )
    results = read_results(out)
    rate = f" at {spec.rate:.2f}/s offered" if spec.rate else ""
    print(f"  {strategy} {spec.label}: {len(results)} requests{rate}", file=sys.stderr)
    before = frozenset(sent)  # what this gateway was sent before: warm-ups, earlier stages
    first = first_sends(results, sent)
    summary = {**summary, "offered_rate_per_s": spec.rate} if spec.mode == "open" else summary
    return StageRun(
        strategy, spec.label, spec.concurrency, results, summary, sampler.usage, str(out), first,
        before,
    )  # fmt: skip


def first_sends(results: Sequence[RequestResult], sent: set[str]) -> tuple[bool, ...]:
    """Per result (in send order): is it the first time this item id reached the gateway?

    Adds the ids to ``sent``.  A re-sent item id is an artefact of replaying a workload
    (warm-ups, earlier stages, the closed loop wrapping), not one of its own repeats.
    """
    first = [False] * len(results)
    for i in sorted(range(len(results)), key=lambda i: results[i].start_s):
        first[i] = results[i].item not in sent
        sent.add(results[i].item)
    return tuple(first)


def loadgen_args(
    args: argparse.Namespace,
    workload: Path,
    url: str,
    spec: StageSpec,
    duration: float,
    start_offset: int = 0,
    max_requests: int | None = None,
) -> list[str]:
    """The load generator's command line for one run (warm-up or stage), less ``--out``;
    ``max_requests`` replaces ``--max-requests`` (an aligned warm-up's own cap)."""
    argv = [
        "--base-url", f"{url}/v1", "--workload", str(workload), "--model", "auto",
        "--mode", spec.mode, "--duration", f"{duration:g}", "--start-offset", str(start_offset),
    ]  # fmt: skip
    if spec.concurrency is not None:
        argv += ["--concurrency", str(spec.concurrency)]
    if spec.mode == "open":
        argv += ["--time-scale", f"{args.time_scale:g}"]
        if spec.rate is not None:
            argv += ["--rate", f"{spec.rate:.6g}"]
    cap = max_requests if max_requests is not None else args.max_requests
    if cap is not None:
        argv += ["--max-requests", str(cap)]
    if sys.stderr.isatty():
        argv.append("--progress")
    return argv


def read_results(path: Path) -> list[RequestResult]:
    if not path.exists():
        raise BenchError(f"the load generator wrote no results to {path}")
    with path.open("rb") as source:
        return [RequestResult.from_json(line) for line in source if line.strip()]


def _loadgen(argv: list[str], out: Path, duration: float) -> dict[str, Any]:
    argv = [*argv, "--out", str(out)]
    stderr = None if sys.stderr.isatty() else subprocess.PIPE
    try:
        done = subprocess.run(
            python_module_argv(_LOADGEN, *argv),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            timeout=duration + _MARGIN_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"the load generator ran past {duration + _MARGIN_S:g} s") from exc
    if done.returncode != 0:
        tail = (done.stderr or "")[-2000:]
        raise BenchError(f"the load generator exited {done.returncode}: {tail}")
    return _last_json_line(done.stdout)


def _last_json_line(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.strip().splitlines()):
        with contextlib.suppress(orjson.JSONDecodeError):
            value = orjson.loads(line)
            if isinstance(value, dict):
                return value
    return {}
