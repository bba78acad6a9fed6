"""`bench run` end to end: processes per strategy, the load generator per stage, the figures.

For each strategy: a light and a heavy emulator (``--workload`` so they know the labels,
``--model`` = the base config's channel model names, ``--profile``'s engine settings) and a
gateway configured by the strategy, all fresh so no strategy inherits another's warm state.
Then its stages (``stages.py``): at each concurrency and/or once in the open loop, a warm-up
run of the load generator whose results are discarded, and the measured stage, with the
gateway's CPU and RSS sampled.  Stages of one strategy run in order on the same processes
(c=20 then c=50 ... then open), as a long-running service would.  Once the gateway has
stopped, the late answers of its deadline fallbacks are read from its request log
(``late.py``).  A strategy that breaks (its gateway does not start, a process dies) is listed
in the report with a one-line cause and the run goes on with the next one; the report keeps
what the others measured and the command exits 1.  Every process started here is stopped
before ``main`` returns, on success, error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import subprocess
import sys
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from hybrid_gateway.config import parse_config
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.tools.bench.late import late_of, read_audit_costs, read_late_rows
from hybrid_gateway.tools.bench.learned_router import (
    LearnedRouter,
    RouterLearnError,
    learn_from_files,
)
from hybrid_gateway.tools.bench.learned_router import apply as apply_router
from hybrid_gateway.tools.bench.report import (
    FailedStrategy,
    RunInfo,
    StageRun,
    build_report,
    write_report,
)
from hybrid_gateway.tools.bench.stages import (
    BASELINE,
    BenchError,
    Replay,
    aligned_stretches,
    run_stage,
    stage_specs,
    sustained_rate,
)
from hybrid_gateway.tools.bench.strategies import FULL_CONFIG, STRATEGIES, channel_of_lane
from hybrid_gateway.tools.cliargs import sigterm_stops_the_run
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


@dataclass(frozen=True)
class Plan:
    """What the run needs beyond ``args``: the folder, the workload and the base config."""

    run_dir: Path
    workload: Path
    base: Mapping[str, Any]
    models: Mapping[str, str]  # lane -> the model name its channel asks for
    profiles: Mapping[str, str]  # lane -> the emulator profile that plays it
    items: int = 0  # the workload's length
    router: LearnedRouter | None = None  # the full strategies' classifier (--router-sample)


def lane_profiles(profile: str) -> dict[str, str]:
    """``--profile default``: the ``light`` and ``heavy`` profiles; ``article`` (``h200``):
    ``article-light`` and ``article-heavy`` (``h200-light`` and ``h200-heavy``)."""
    return {lane: lane if profile == "default" else f"{profile}-{lane}" for lane in LANES}


def main(args: argparse.Namespace) -> int:
    started = datetime.now(UTC)
    # absolute: each gateway runs with its own folder as its working directory
    run_dir = args.out.resolve() / f"bench-{started:%Y%m%d-%H%M%S}"
    try:
        with sigterm_stops_the_run():
            plan = _plan(args, run_dir)
            stages, failed = _run_all(args, plan)
    except (ConfigError, RouterLearnError) as exc:
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
        notes=() if plan.router is None else (plan.router.note(),),
    )
    items = {item.id: item for item in read_workload(plan.workload)}
    labels = {item_id: item.labels for item_id, item in items.items()}
    report = build_report(info, stages, labels, failed, items)
    paths = write_report(report, args.out, started, plots=not args.no_plots)
    print(report["markdown_table"])
    for path in paths:
        print(f"wrote {path}")
    if failed:
        causes = "; ".join(f"{f.strategy}: {f.cause}" for f in failed)
        print(f"bench run: {len(failed)} of {len(args.strategies)} strategies failed, the report "
              f"has the others: {causes}", file=sys.stderr)  # fmt: skip
        return 1
    return 0


def _plan(args: argparse.Namespace, run_dir: Path) -> Plan:
    run_dir.mkdir(parents=True, exist_ok=True)
    base = _load_base(args.base_config)
    models = {lane: str(channel_of_lane(base, lane)["model"]) for lane in LANES}
    workload = args.workload or build_workload(
        run_dir / "workload.jsonl", args.size, args.seed, args.kind
    )
    workload = workload.resolve()
    if not workload.is_file():
        raise BenchError(f"no workload file at {workload}")
    profiles = lane_profiles(args.profile)
    if args.profile != "default":
        base = widened_channels(base, profiles)
    items = len(read_workload(workload))
    router = _learned_router(args, run_dir, workload)
    return Plan(run_dir, workload.resolve(), base, models, profiles, items, router)


def _learned_router(
    args: argparse.Namespace, run_dir: Path, workload: Path
) -> LearnedRouter | None:
    """The full strategies' classifier from ``--router-sample`` (or a built sample of
    ``--kind``, seed ``--seed`` + 1000), when a strategy that has one runs (learned_router.py)."""
    if not any(n.startswith("full") and n != "full-no-classifier" for n in args.strategies):
        return None
    samples = list(args.router_sample or ())
    if not samples and args.router_sample_size > 0:
        out = run_dir / "router-sample.jsonl"
        samples = [build_workload(out, args.router_sample_size, args.seed + 1000, args.kind)]
    if not samples:
        return None
    return learn_from_files(samples, workload, FULL_CONFIG, run_dir / "router", args.router_floor)


def widened_channels(base: Mapping[str, Any], profiles: Mapping[str, str]) -> dict[str, Any]:
    """The base config with each lane's channel allowed as many requests as its emulator batches.

    examples/gateway.yaml's limits (light 64, heavy 32) are sized for the default profiles; the
    ``article`` models batch 256 and 128, and the article's heavy-only row has no gateway limit
    below the server's own.  A smaller limit would queue in the gateway instead (measured:
    heavy-only at 100 clients, p50 7.4 s behind a limit of 32).  Lane queues (``full``) are
    the configs' own and stay.
    """
    from hybrid_gateway.tools.emulator.settings import profile

    config = copy.deepcopy(dict(base))
    for lane, name in profiles.items():
        channel = channel_of_lane(config, lane)
        slots = profile(name).engine.max_num_seqs
        channel["max_concurrency"] = max(int(channel.get("max_concurrency", 0)), slots)
    return config


def _run_all(args: argparse.Namespace, plan: Plan) -> tuple[list[StageRun], list[FailedStrategy]]:
    """Every strategy in turn; the baseline first when the open loop offers its rate.

    A strategy that breaks is listed with its cause and the next one runs, but for the
    baseline that sets the open loop's rate: without it, the others are not run.
    """
    names = list(args.strategies)
    sets_rate = args.mode == "both" and args.rate is None
    if sets_rate:
        if BASELINE not in names:
            raise BenchError(f"--mode both needs --rate or the {BASELINE} strategy to set it")
        names.remove(BASELINE)
        names.insert(0, BASELINE)
    stages: list[StageRun] = []
    failed: list[FailedStrategy] = []
    rate = args.rate
    for i, name in enumerate(names):
        try:
            ran = _run_strategy(args, plan, name, rate)
        except Exception as exc:  # any one strategy's failure: the others are kept
            failed.append(_failure(plan, name, exc))
            print(f"strategy {name} failed: {failed[-1].cause}", file=sys.stderr)
            if sets_rate and name == BASELINE:
                cause = f"not run: {BASELINE} failed, and it sets the open loop's rate (--rate)"
                failed += [FailedStrategy(later, cause) for later in names[i + 1 :]]
                break
            continue
        if rate is None and name == BASELINE:
            rate = sustained_rate(ran)
        stages += ran
    return stages, failed


# A strategy's expected ways to break: their message says it all (others are a bug: traceback).
_BROKE = (BenchError, ProcessStartError, ProcessLookupError, OSError, ConfigError)


def _failure(plan: Plan, name: str, exc: Exception) -> FailedStrategy:
    if not isinstance(exc, _BROKE):
        traceback.print_exception(exc, file=sys.stderr)
    return FailedStrategy(name, one_line_cause(exc), str(plan.run_dir / name / "logs"))


def one_line_cause(exc: BaseException) -> str:
    """The first line of ``exc``; for a process that did not start, with the last line of its
    stderr (a gateway's ``config error: FILE: FIELD: EXPECTED``)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    head = lines[0] if lines else ""
    if "stderr tail:" in lines:
        tail = lines[lines.index("stderr tail:") + 1 :]
        if tail and tail[-1] != "(no output)":
            head = f"{head}: {tail[-1]}"
    if not isinstance(exc, _BROKE):
        head = f"{type(exc).__name__}: {head}" if head else type(exc).__name__
    return head


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


def build_workload(out: Path, size: int, seed: int, kind: str) -> Path:
    argv = python_module_argv(
        "hybrid_gateway.cli", "workload", "build", "--out", str(out),
        "--size", str(size), "--seed", str(seed), "--kind", kind,
    )  # fmt: skip
    print(f"building the workload: {' '.join(argv[1:])}", file=sys.stderr)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise BenchError(f"workload build exited {done.returncode}: {done.stderr[-2000:]}")
    return out


def _run_strategy(
    args: argparse.Namespace, plan: Plan, name: str, rate: float | None
) -> list[StageRun]:
    folder = plan.run_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    print(f"strategy {name}", file=sys.stderr)
    stages = _run_processes(args, plan, name, rate, folder)
    log = folder / "requests.sqlite3"  # the gateway has stopped: all logged
    rows, audits = read_late_rows(log), read_audit_costs(log)
    return [dataclasses.replace(s, late=late_of(s.results, rows, audits)) for s in stages]


def _run_processes(
    args: argparse.Namespace, plan: Plan, name: str, rate: float | None, folder: Path
) -> list[StageRun]:
    with contextlib.ExitStack() as stack:
        emulators = {lane: _start_emulator(args, plan, lane, folder, stack) for lane in LANES}
        upstreams = {lane: f"{proc.url}/v1" for lane, proc in emulators.items()}
        config = STRATEGIES[name](plan.base, upstreams, folder / "requests.sqlite3")
        if plan.router is not None and name.startswith("full"):
            config = apply_router(config, plan.router)
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
        replay = Replay(stretches=aligned_stretches(args, len(stage_specs(args)), plan.items))
        stages: list[StageRun] = []
        try:
            for spec in stage_specs(args):
                if spec.mode == "open" and args.mode == "both":
                    offered = rate if rate is not None else sustained_rate(stages)
                    spec = dataclasses.replace(spec, rate=offered)
                stages.append(
                    run_stage(args, plan.workload, folder, name, spec, gateway, processes, replay)
                )
        except BenchError:
            _print_child_logs(processes)
            raise
        return stages


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
        "emulate", "--profile", plan.profiles[lane], "--tier", lane, "--model", plan.models[lane],
        "--host", "127.0.0.1", "--port", "0", "--workload", str(plan.workload),
    ]  # fmt: skip


def _started(stack: contextlib.ExitStack, process: ManagedProcess) -> ManagedProcess:
    stack.callback(stop_process, process)
    print(f"  started {process.name} (pid {process.pid}) at {process.url}", file=sys.stderr)
    return process


def _print_child_logs(processes: Sequence[ManagedProcess]) -> None:
    for proc in processes:
        tail = proc.stderr_path.read_text(errors="replace").splitlines()[-15:]
        print(f"--- {proc.name} stderr (tail) ---", *tail, sep="\n", file=sys.stderr)


def _settings(args: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    return {
        "strategies": list(args.strategies),
        "mode": args.mode,
        "concurrency": list(args.concurrency) if args.mode != "open" else None,
        "time_scale": args.time_scale if args.mode == "open" and args.rate is None else None,
        # the open loop's Poisson rate: --rate, or (null) heavy-only's rate at the highest
        # concurrency of this run; each open stage's loadgen.offered_rate_per_s says what it got
        "rate_per_s": args.rate,
        "profile": args.profile,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "max_requests": args.max_requests,
        "base_config": str(args.base_config),
        # the full strategies' classifier, when learned before the run (learned_router.py)
        "router": None if plan.router is None else dict(plan.router.summary),
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
            "profile": dataclasses.asdict(profile(plan.profiles[lane])),
        }
        for lane in LANES
    }
