"""`bench run` end to end: processes per strategy, the load generator per stage, the figures.

For each strategy: a light and a heavy emulator (``--workload`` so they know the labels, and
``--model`` = the base config's channel model names) and a gateway configured by the strategy,
all fresh so no strategy inherits another's warm state.  Then, at each concurrency (or once, in
open mode): a warm-up run of the load generator whose results are discarded, and the measured
stage, with the gateway's CPU and RSS sampled.  Stages of one strategy run in order on the same
processes (c=20 then c=50 ...), as a long-running service would.  Every process started here is
stopped before ``main`` returns, on success, error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import yaml

from hybrid_gateway.config import parse_config
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.tools.bench.report import RunInfo, StageRun, build_report, write_report
from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.bench.strategies import STRATEGIES, channel_of_lane
from hybrid_gateway.tools.cliargs import sigterm_stops_the_run
from hybrid_gateway.tools.overhead.procstat import ProcessSampler
from hybrid_gateway.tools.processes import (
    ManagedProcess,
    ProcessStartError,
    python_module_argv,
    start_process,
    stop_process,
)
from hybrid_gateway.tools.workload.schema import read_meta, read_workload

__all__ = ["BenchError", "main"]

LANES = ("light", "heavy")
_LOADGEN = "hybrid_gateway.tools.bench.loadgen"
_MARGIN_S = 120.0  # how long past its --duration a load generator may run before we kill it


class BenchError(RuntimeError):
    """The run broke: a process died, the load generator failed, a file is unreadable."""


@dataclass(frozen=True)
class Plan:
    """What the run needs beyond ``args``: the folder, the workload and the base config."""

    run_dir: Path
    workload: Path
    base: Mapping[str, Any]
    models: Mapping[str, str]  # lane -> the model name its channel asks for


def main(args: argparse.Namespace) -> int:
    started = datetime.now(UTC)
    # absolute: each gateway runs with its own folder as its working directory
    run_dir = args.out.resolve() / f"bench-{started:%Y%m%d-%H%M%S}"
    try:
        with sigterm_stops_the_run():
            plan = _plan(args, run_dir)
            stages = [s for name in args.strategies for s in _run_strategy(args, plan, name)]
    except ConfigError as exc:
        print(f"bench run: {exc}", file=sys.stderr)
        return 2
    except (BenchError, ProcessStartError, ProcessLookupError, OSError) as exc:
        print(f"bench run: the run broke: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench run: interrupted; every process it started is stopped", file=sys.stderr)
        return 130
    info = RunInfo(
        started_at=started,
        finished_at=datetime.now(UTC),
        argv=list(sys.argv),
        settings=_settings(args, plan),
        workload=_workload_facts(plan.workload),
        emulators=_emulator_facts(plan),
    )
    labels = {item.id: item.labels for item in read_workload(plan.workload)}
    report = build_report(info, stages, labels)
    paths = write_report(report, args.out, started, plots=not args.no_plots)
    print(report["markdown_table"])
    for path in paths:
        print(f"wrote {path}")
    return 0


def _plan(args: argparse.Namespace, run_dir: Path) -> Plan:
    run_dir.mkdir(parents=True, exist_ok=True)
    base = _load_base(args.base_config)
    models = {lane: str(channel_of_lane(base, lane)["model"]) for lane in LANES}
    workload = (args.workload or _build_workload(args, run_dir)).resolve()
    if not workload.is_file():
        raise BenchError(f"no workload file at {workload}")
    return Plan(run_dir, workload.resolve(), base, models)


def _load_base(path: Path) -> Mapping[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(str(path), "<file>", f"a readable YAML file ({exc})") from None
    config = parse_config(data, str(path))  # validates; the dict is what strategies edit
    for lane in LANES:
        if lane not in config.lanes:
            raise ConfigError(str(path), "lanes", f"a lane named {lane!r}")
    return dict(data)


def _build_workload(args: argparse.Namespace, run_dir: Path) -> Path:
    out = run_dir / "workload.jsonl"
    argv = python_module_argv(
        "hybrid_gateway.cli", "workload", "build", "--out", str(out),
        "--size", str(args.size), "--seed", str(args.seed), "--kind", args.kind,
    )  # fmt: skip
    print(f"building the workload: {' '.join(argv[1:])}", file=sys.stderr)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise BenchError(f"workload build exited {done.returncode}: {done.stderr[-2000:]}")
    return out


def _run_strategy(args: argparse.Namespace, plan: Plan, name: str) -> list[StageRun]:
    folder = plan.run_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    print(f"strategy {name}", file=sys.stderr)
    with contextlib.ExitStack() as stack:
        emulators = {lane: _start_emulator(args, plan, lane, folder, stack) for lane in LANES}
        upstreams = {lane: f"{proc.url}/v1" for lane, proc in emulators.items()}
        config = STRATEGIES[name](plan.base, upstreams, folder / "requests.sqlite3")
        config_path = folder / "gateway.yaml"
        config_path.write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False))
        gateway = _started(
            stack,
            start_process(
                f"gateway-{name}",
                python_module_argv("hybrid_gateway.cli", "serve", "--config", str(config_path)),
                folder / "logs",
                args.startup_timeout,
                cwd=folder,
            ),
        )
        processes = [gateway, *emulators.values()]
        replay = Replay()
        try:
            return [
                _run_stage(args, plan, (name, label, conc, index), gateway, processes, replay)
                for index, (label, conc) in enumerate(_stages(args))
            ]
        except BenchError:
            _print_child_logs(processes)
            raise


def _start_emulator(
    args: argparse.Namespace, plan: Plan, lane: str, folder: Path, stack: contextlib.ExitStack
) -> ManagedProcess:
    argv = python_module_argv("hybrid_gateway.cli", *emulator_args(plan, lane))
    return _started(
        stack, start_process(f"emulator-{lane}", argv, folder / "logs", args.startup_timeout)
    )


def emulator_args(plan: Plan, lane: str) -> list[str]:
    """The `hybrid-gateway ...` arguments of the emulator playing ``lane``."""
    return [
        "emulate", "--profile", lane, "--tier", lane, "--model", plan.models[lane],
        "--host", "127.0.0.1", "--port", "0", "--workload", str(plan.workload),
    ]  # fmt: skip


def _started(stack: contextlib.ExitStack, process: ManagedProcess) -> ManagedProcess:
    stack.callback(stop_process, process)
    print(f"  started {process.name} (pid {process.pid}) at {process.url}", file=sys.stderr)
    return process


def _stages(args: argparse.Namespace) -> list[tuple[str, int | None]]:
    if args.mode == "open":
        return [("open", None)]
    return [(f"c{conc}", conc) for conc in args.concurrency]


def _run_stage(
    args: argparse.Namespace,
    plan: Plan,
    stage: tuple[str, str, int | None, int],
    gateway: ManagedProcess,
    processes: Sequence[ManagedProcess],
    replay: Replay,
) -> StageRun:
    strategy, label, conc, _ = stage
    folder = plan.run_dir / strategy
    sent = replay.sent
    if args.warmup > 0:
        warmup = loadgen_args(args, plan.workload, gateway.url, conc, args.warmup, replay.offset)
        warm = folder / f"{label}-warmup.jsonl"
        replay.offset = _loadgen(warmup, warm, args.warmup).get("next_offset", replay.offset)
        sent.update(r.item for r in read_results(warm))
    out = folder / f"{label}.jsonl"
    measured = loadgen_args(args, plan.workload, gateway.url, conc, args.duration, replay.offset)
    with ProcessSampler(gateway.pid) as sampler:
        summary = _loadgen(measured, out, args.duration)
    replay.offset = summary.get("next_offset", replay.offset)
    for proc in processes:
        if proc.popen.poll() is not None:
            raise BenchError(f"{proc.name} exited with code {proc.popen.returncode} in {label}")
    results = read_results(out)
    print(f"  {strategy} {label}: {len(results)} requests", file=sys.stderr)
    first = first_sends(results, sent)
    return StageRun(strategy, label, conc, results, summary, sampler.usage, str(out), first)


@dataclass(slots=True)
class Replay:
    """Where one gateway's replay stands: the next workload item, and the ids already sent.

    Warm-up and stages continue through the workload in order, so a stage re-sends an item only
    once the whole workload has gone by (counted as ``resent_share`` in the report).
    """

    offset: int = 0
    sent: set[str] = field(default_factory=set)


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


def loadgen_args(
    args: argparse.Namespace,
    workload: Path,
    url: str,
    conc: int | None,
    duration: float,
    start_offset: int = 0,
) -> list[str]:
    """The load generator's command line for one run (warm-up or stage), less ``--out``."""
    argv = [
        "--base-url", f"{url}/v1", "--workload", str(workload), "--model", "auto",
        "--mode", args.mode, "--duration", f"{duration:g}", "--start-offset", str(start_offset),
    ]  # fmt: skip
    if conc is not None:
        argv += ["--concurrency", str(conc)]
    if args.mode == "open":
        argv += ["--time-scale", f"{args.time_scale:g}"]
    if args.max_requests is not None:
        argv += ["--max-requests", str(args.max_requests)]
    if sys.stderr.isatty():
        argv.append("--progress")
    return argv


def read_results(path: Path) -> list[RequestResult]:
    if not path.exists():
        raise BenchError(f"the load generator wrote no results to {path}")
    with path.open("rb") as source:
        return [RequestResult.from_json(line) for line in source if line.strip()]


def _last_json_line(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.strip().splitlines()):
        with contextlib.suppress(orjson.JSONDecodeError):
            value = orjson.loads(line)
            if isinstance(value, dict):
                return value
    return {}


def _print_child_logs(processes: Sequence[ManagedProcess]) -> None:
    for proc in processes:
        tail = proc.stderr_path.read_text(errors="replace").splitlines()[-15:]
        print(f"--- {proc.name} stderr (tail) ---", *tail, sep="\n", file=sys.stderr)


def _settings(args: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    return {
        "strategies": list(args.strategies),
        "mode": args.mode,
        "concurrency": list(args.concurrency) if args.mode == "closed" else None,
        "time_scale": args.time_scale if args.mode == "open" else None,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "max_requests": args.max_requests,
        "base_config": str(args.base_config),
        "models": dict(plan.models),
        "run_dir": str(plan.run_dir),
    }


def _workload_facts(path: Path) -> dict[str, Any]:
    items = read_workload(path)
    return {
        "path": str(path),
        "items": len(items),
        "simple_share": sum(1 for i in items if i.labels.complexity == "simple") / len(items)
        if items
        else None,
        "meta": read_meta(path),
    }


def _emulator_facts(plan: Plan) -> dict[str, Any]:
    from hybrid_gateway.tools.emulator.settings import profile

    return {
        lane: {
            "command": "hybrid-gateway " + " ".join(emulator_args(plan, lane)),
            "profile": dataclasses.asdict(profile(lane)),
        }
        for lane in LANES
    }
