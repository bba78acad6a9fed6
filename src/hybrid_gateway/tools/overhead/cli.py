"""`hybrid-gateway bench overhead`: what the gateway's pass-through path costs, vs a bare proxy.

One run starts, on 127.0.0.1 and free ports, an emulator in zero-delay mode, a bare aiohttp
relay in front of it, and the gateway in front of it; then drives each with wrk at each
concurrency (warm-up discarded), sampling the CPU and RSS of the process under test; then
writes ``overhead-YYYYmmdd-HHMMSS.{json,md}`` and prints the Markdown.  Every process it
starts is stopped before it returns, on success, error or Ctrl-C.

``bench`` is a group: ``bench overhead`` is the only subcommand today; workload replay
(``bench run``) plugs into ``_SUBCOMMANDS`` later.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from hybrid_gateway.tools.cliargs import concurrency_list, int_at_least, sigterm_stops_the_run
from hybrid_gateway.tools.overhead.bare_proxy import loop_name
from hybrid_gateway.tools.overhead.full_args import add_full_arguments
from hybrid_gateway.tools.overhead.procstat import ProcessSampler
from hybrid_gateway.tools.overhead.report import (
    LevelResult,
    RunInfo,
    build_report,
    machine_facts,
    render_markdown,
    write_report,
)
from hybrid_gateway.tools.overhead.wrk import (
    CHAT_PATH,
    WRK_INSTALL_HINT,
    WrkError,
    WrkRun,
    find_wrk,
    run_wrk,
    wrk_version,
)
from hybrid_gateway.tools.processes import (
    ManagedProcess,
    ProcessStartError,
    python_module_argv,
    start_process,
    stop_process,
)

__all__ = ["TARGET_NAMES", "add_arguments", "run"]

# gateway-pool: the same gateway with each channel as a pool of one endpoint (``endpoints``
# instead of ``base_url``), to compare the pool's pass-through path with the single client's.
TARGET_NAMES = ("emulator", "bare", "gateway", "gateway-pool")
T = TypeVar("T")

_GATEWAY_CONFIG = """\
server:
  host: 127.0.0.1
  port: 0
  request_log: {{path: requests.sqlite3}}
channels:
  light-emu: {{base_url: "{base}", model: light-model, price_per_1m_input: 0.1, price_per_1m_output: 0.2, max_concurrency: 256}}
  heavy-emu: {{base_url: "{base}", model: heavy-model, price_per_1m_input: 1.0, price_per_1m_output: 2.0, max_concurrency: 256}}
lanes:
  light: {{channel: light-emu}}
  heavy: {{channel: heavy-emu}}
routing:
  default_lane: heavy
  rules:
    - {{name: short-question, when: {{max_chars: 200}}, lane: light}}
cache:
  exact: {{enabled: true, ttl_s: 600, max_entries: 10000}}
"""  # noqa: E501


@dataclass(frozen=True)
class Target:
    """A URL to load and the process whose CPU/RSS counts for it."""

    name: str
    url: str
    process: ManagedProcess
    upstream: ManagedProcess | None  # the emulator behind a proxy, sampled for context


def add_arguments(overhead: argparse.ArgumentParser) -> None:
    """The options of `hybrid-gateway bench overhead`."""
    overhead.add_argument(
        "--duration", type=int_at_least(1), default=10, help="seconds per level (default 10)"
    )
    overhead.add_argument(
        "--warmup",
        type=int_at_least(0),
        default=2,
        help="warm-up seconds per level, discarded (default 2)",
    )
    overhead.add_argument(
        "--concurrency",
        type=concurrency_list,
        default=[1, 20, 50],
        help="comma list (default 1,20,50)",
    )
    overhead.add_argument(
        "--targets",
        type=_target_list,
        default=list(TARGET_NAMES[:3]),
        help="comma list of emulator,bare,gateway,gateway-pool (default emulator,bare,gateway;"
        " gateway-pool: the gateway with each channel a one-endpoint pool)",
    )
    overhead.add_argument(
        "--out", type=Path, default=Path("out/bench"), help="report folder (default out/bench/)"
    )
    overhead.add_argument(
        "--emulator-profile", default="light", help="emulator --profile (default light)"
    )
    overhead.add_argument(
        "--startup-timeout",
        type=float,
        default=60.0,
        help="seconds to wait for each process's listening line",
    )
    overhead.add_argument(
        "--gateway-log-level",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        default="INFO",
        help="the gateway's serve --log-level: INFO logs a line per request, WARNING none "
        "(default INFO)",
    )
    overhead.add_argument(
        "--gateway-workers",
        type=int_at_least(1),
        default=1,
        help="serve --workers for every gateway target (pass-through, pool, full); CPU and RSS "
        "are summed over the workers (default 1)",
    )
    add_full_arguments(overhead)


def run(args: argparse.Namespace) -> int:
    wrk = find_wrk()
    if wrk is None:
        print(f"bench overhead: {WRK_INSTALL_HINT}", file=sys.stderr)
        return 2
    if args.pipeline == "full":
        from hybrid_gateway.tools.overhead.full import run_full  # imports the gateway's parts

        return run_full(args, wrk)
    started = datetime.now(UTC)
    results = guarded(lambda: _run_all(args, wrk))
    if isinstance(results, int):
        return results
    info = RunInfo(
        started_at=started,
        finished_at=datetime.now(UTC),
        argv=_command_line(args),
        machine=machine_facts(loop_name(), wrk_version(wrk)),
        settings=_settings(args),
        notes=_notes(),
    )
    report = build_report(info, results)
    json_path, md_path = write_report(report, args.out, started)
    print(render_markdown(report))
    print(f"wrote {json_path} and {md_path}")
    return 0


def guarded(measure: Callable[[], T]) -> T | int:
    """Run ``measure``; a broken run or Ctrl-C is one line on stderr and its exit code."""
    try:
        with sigterm_stops_the_run():
            return measure()
    except (ProcessStartError, WrkError, ProcessLookupError, OSError) as exc:
        print(f"bench overhead: the run broke: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench overhead: interrupted; every process it started is stopped", file=sys.stderr)
        return 130


def _run_all(args: argparse.Namespace, wrk: str) -> list[LevelResult]:
    with (
        tempfile.TemporaryDirectory(prefix="hg-bench-overhead-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        work = Path(tmp)
        targets = _start_targets(args, work, stack)
        try:
            return _measure(args, wrk, targets, work)
        except WrkError:
            print_child_logs(targets)
            raise


def _start_targets(
    args: argparse.Namespace, work: Path, stack: contextlib.ExitStack
) -> list[Target]:
    timeout = args.startup_timeout
    logs = work / "logs"
    emulator = track_process(
        stack,
        start_process(
            "emulator",
            python_module_argv(
                "hybrid_gateway.cli",
                "emulate",
                "--profile",
                args.emulator_profile,
                "--zero-delay",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
            ),
            logs,
            timeout,
        ),
    )
    targets = {"emulator": Target("emulator", emulator.url, emulator, None)}
    if "bare" in args.targets:
        argv = python_module_argv(
            "hybrid_gateway.tools.overhead.bare_proxy", "--upstream", emulator.url, "--port", "0"
        )
        bare = track_process(stack, start_process("bare", argv, logs, timeout))
        targets["bare"] = Target("bare", bare.url, bare, emulator)
    for name in ("gateway", "gateway-pool"):
        if name not in args.targets:
            continue
        config = _write_gateway_config(work / name, emulator.url, pool=name == "gateway-pool")
        argv = python_module_argv("hybrid_gateway.cli", "serve", "--config", str(config),
                                  "--log-level", args.gateway_log_level,
                                  *workers_argv(args))  # fmt: skip
        gateway = track_process(stack, start_process(name, argv, logs, timeout, cwd=config.parent))
        targets[name] = Target(name, gateway.url, gateway, emulator)
    return [targets[name] for name in args.targets]


def track_process(stack: contextlib.ExitStack, process: ManagedProcess) -> ManagedProcess:
    stack.callback(stop_process, process)
    print(f"started {process.name} (pid {process.pid}) at {process.url}", file=sys.stderr)
    return process


def _write_gateway_config(folder: Path, emulator_url: str, *, pool: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "gateway.yaml"
    text = _GATEWAY_CONFIG.format(base=f"{emulator_url}/v1")
    if pool:  # the one-endpoint pool form of the same channels
        text = text.replace(
            f'base_url: "{emulator_url}/v1"', f'endpoints: [{{url: "{emulator_url}/v1"}}]'
        )
    path.write_text(text)
    return path


def _measure(
    args: argparse.Namespace, wrk: str, targets: Sequence[Target], work: Path
) -> list[LevelResult]:
    # Concurrency outside, targets inside: drift in the machine's background load then hits
    # all targets of one level alike, which keeps the gateway/bare ratios honest.
    results = []
    for conc in args.concurrency:
        for target in targets:
            result = run_level(args, wrk, target, conc, work / "lua")
            results.append(result)
            print_progress(result)
    return results


def run_level(
    args: argparse.Namespace,
    wrk: str,
    target: Target,
    conc: int,
    script_dir: Path,
    prompt: str = "classic",
) -> LevelResult:
    """One target at one concurrency: warm-up, then wrk measured with CPU/RSS sampling."""
    url = target.url
    if args.warmup > 0:
        run_wrk(wrk, WrkRun(url, conc, args.warmup, prompt=prompt), script_dir)
    measured = WrkRun(url, conc, args.duration, prompt=prompt)
    with contextlib.ExitStack() as samplers:
        sampler = samplers.enter_context(ProcessSampler(target.process.pid))
        upstream = (
            samplers.enter_context(ProcessSampler(target.upstream.pid)) if target.upstream else None
        )
        load = run_wrk(wrk, measured, script_dir)
    for proc in (target.process, target.upstream):
        if proc is not None and proc.popen.poll() is not None:
            raise WrkError(f"{proc.name} exited with code {proc.popen.returncode} during the level")
    return LevelResult(
        target=target.name,
        concurrency=conc,
        threads=measured.threads,
        load=load,
        usage=sampler.usage,
        upstream_cpu_s=upstream.usage.cpu_s if upstream else None,
        prompt=prompt,
    )


def print_progress(r: LevelResult) -> None:
    cpu = r.cpu_ms_per_request
    cpu_text = "n/a" if cpu is None else f"{cpu:.3f}"
    print(
        f"  {r.target:<8} {r.prompt:<7} c={r.concurrency:<3} {r.load.rps:8.0f} rps  "
        f"p50 {r.load.p50_ms:6.2f} ms  "
        f"p99 {r.load.p99_ms:7.2f} ms  errors {r.load.errors}  CPU {cpu_text} ms/req  "
        f"RSS {r.usage.peak_rss_mib:.0f} MiB",
        file=sys.stderr,
    )


def print_child_logs(targets: Sequence[Target]) -> None:
    seen: set[int] = set()
    for target in targets:
        for proc in (target.process, target.upstream):
            if proc is None or proc.pid in seen:
                continue
            seen.add(proc.pid)
            tail = proc.stderr_path.read_text(errors="replace").splitlines()[-15:]
            print(f"--- {proc.name} stderr (tail) ---", *tail, sep="\n", file=sys.stderr)


def _command_line(args: argparse.Namespace) -> list[str]:
    """The command that reproduces this run, whichever way it was invoked."""
    return [
        "hybrid-gateway",
        "bench",
        "overhead",
        f"--duration={args.duration}",
        f"--warmup={args.warmup}",
        f"--concurrency={','.join(map(str, args.concurrency))}",
        f"--targets={','.join(args.targets)}",
        f"--out={shlex.quote(str(args.out))}",
        f"--emulator-profile={args.emulator_profile}",
        f"--gateway-log-level={args.gateway_log_level}",
        *([f"--gateway-workers={args.gateway_workers}"] if args.gateway_workers > 1 else []),
    ]


def workers_argv(args: argparse.Namespace) -> list[str]:
    """``serve --workers N`` for ``--gateway-workers N`` (nothing for one)."""
    workers = getattr(args, "gateway_workers", 1)
    return ["--workers", str(workers)] if workers > 1 else []


def _settings(args: argparse.Namespace) -> dict[str, object]:
    return {
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "concurrency": list(args.concurrency),
        "targets": list(args.targets),
        "wrk_threads": "min(concurrency, 2)",
        "path": CHAT_PATH,
        "emulator": f"--profile {args.emulator_profile} --zero-delay",
        "gateway_log_level": args.gateway_log_level,
        "gateway_workers": args.gateway_workers,
        "body": '{"model": "auto", "messages": [{"role": "user", "content": '
        '"What is the capital of France? #<run token>-<wrk thread>-<counter>"}], "max_tokens": 16}',
        "unique_bodies": True,
        "invoked_as": list(sys.argv),
    }


def _notes() -> list[str]:
    return [
        "CPU ms/req counts one process only: the emulator for the emulator row, the relay for "
        "bare, the gateway for gateway (with --gateway-workers, its parent and every worker; "
        "the emulator behind a proxy is in upstream_cpu_ms_per_request).",
        "wrk, the emulator and the process under test share the machine's cores, so RPS is "
        "bounded by all three; compare the gateway with the bare proxy of the same run, not "
        "across machines.",
        "errors = responses with status >= 400 + socket errors (connect, read, write, timeout).",
        "Each request body is unique (run token + wrk thread + counter): the exact cache always "
        "misses.",
    ]


def _target_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in TARGET_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"targets are {','.join(TARGET_NAMES)}; got {text!r}")
    return [n for n in TARGET_NAMES if n in names]  # fixed order, no duplicates
