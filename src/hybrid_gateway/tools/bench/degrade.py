"""`hybrid-gateway bench degrade`: faults and overload under load, with the figures issue 6 asks.

Scenarios and targets are in ``degrade_plan.py``.  Each scenario starts fresh emulators and a
gateway on 127.0.0.1, drives them with the load generator (its own process, one per lane when
two lanes are loaded at once), samples the gateway's CPU and RSS, and stops every process it
started before returning.  Baselines are measured in the same run: the lanes' capacity (closed
loop at their slot count) and the light lane's p95 with the heavy lane idle.  The report goes
to ``--out`` as ``degrade-YYYYmmdd-HHMMSS.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import yaml

from hybrid_gateway.tools.bench.degrade_plan import (
    HEAVY_SLOTS,
    LIGHT_SLOTS,
    QUEUE_TIMEOUT_S,
    gateway_config,
    stage_figures,
    write_synthetic_workload,
)
from hybrid_gateway.tools.bench.degrade_report import render_markdown
from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.cliargs import float_at_least, int_at_least, sigterm_stops_the_run
from hybrid_gateway.tools.overhead.procstat import ProcessSampler
from hybrid_gateway.tools.processes import (
    ManagedProcess,
    ProcessStartError,
    python_module_argv,
    start_process,
    stop_process,
)

__all__ = ["add_arguments", "run"]

SCENARIOS = ("errors", "errors-no-breaker", "isolation", "overload")
_LOADGEN = "hybrid_gateway.tools.bench.loadgen"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help=f"comma list of {','.join(SCENARIOS)} (all)")  # fmt: skip
    parser.add_argument("--duration", type=float_at_least(2.0), default=20.0,
                        help="seconds per measured stage (20)")  # fmt: skip
    parser.add_argument("--calibration", type=float_at_least(2.0), default=10.0,
                        help="seconds to measure each lane's capacity (10)")  # fmt: skip
    parser.add_argument("--errors-concurrency", type=int_at_least(1), default=50)
    parser.add_argument("--light-concurrency", type=int_at_least(1), default=8,
                        help="isolation: closed-loop light clients (8)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("out/bench"))
    parser.add_argument("--startup-timeout", type=float, default=60.0)


def run(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    if not names or any(n not in SCENARIOS for n in names):
        print(f"bench degrade: scenarios are {','.join(SCENARIOS)}", file=sys.stderr)
        return 2
    started = datetime.now(UTC)
    run_dir = args.out.resolve() / f"degrade-{started:%Y%m%d-%H%M%S}"
    run_dir.mkdir(parents=True, exist_ok=True)
    workload = write_synthetic_workload(run_dir / "workload.jsonl", rate_per_s=1.0, seed=7)
    report: dict[str, Any] = {
        "schema": "hybrid-gateway/bench-degrade/1",
        "started_at": started.isoformat(),
        "argv": list(sys.argv),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                     if k not in ("command", "bench_command")},
        "scenarios": {},
    }  # fmt: skip
    try:
        with sigterm_stops_the_run():
            for name in names:
                print(f"scenario {name}", file=sys.stderr)
                scenario = Scenario(args, run_dir / name, workload)
                report["scenarios"][name] = _SCENARIOS[name](scenario)
    except (ProcessStartError, OSError, RuntimeError) as exc:
        print(f"bench degrade: the run broke: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench degrade: interrupted; every process it started is stopped", file=sys.stderr)
        return 130
    report["finished_at"] = datetime.now(UTC).isoformat()
    stem = args.out.resolve() / f"degrade-{started:%Y%m%d-%H%M%S}"
    markdown = render_markdown(report)
    stem.with_suffix(".json").write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    stem.with_suffix(".md").write_text(markdown, encoding="utf-8")
    print(markdown)
    print(f"wrote {stem}.json and {stem}.md")
    return 0


@dataclass
class Load:
    """One load generator run: a lane's model, closed (concurrency) or open (rate per s)."""

    model: str
    duration_s: float
    concurrency: int | None = None
    rate_per_s: float | None = None


class Scenario:
    def __init__(self, args: argparse.Namespace, folder: Path, workload: Path) -> None:
        self.args = args
        self.folder = folder
        self.workload = workload
        self.stages = 0
        folder.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def stack(self, name: str, emulators: Mapping[str, Sequence[str]]) -> Any:
        """Emulators (role -> extra flags), then the gateway configured for ``name``."""
        with contextlib.ExitStack() as stack:
            urls = {}
            for role, flags in emulators.items():
                profile = "heavy" if role.startswith("heavy") else "light"
                argv = python_module_argv(
                    "hybrid_gateway.cli", "emulate", "--profile", profile, "--model", profile,
                    "--host", "127.0.0.1", "--port", "0", *flags,
                )  # fmt: skip
                proc = self._start(stack, f"emulator-{role}", argv, None)
                urls[role] = f"{proc.url}/v1"
            config = gateway_config(name, urls, self.folder / "requests.sqlite3")
            path = self.folder / "gateway.yaml"
            path.write_text(yaml.safe_dump(config, sort_keys=False))
            argv = python_module_argv("hybrid_gateway.cli", "serve", "--config", str(path))
            yield self._start(stack, "gateway", argv, self.folder)

    def _start(
        self, stack: contextlib.ExitStack, name: str, argv: list[str], cwd: Path | None
    ) -> ManagedProcess:
        proc = start_process(name, argv, self.folder / "logs", self.args.startup_timeout, cwd=cwd)
        stack.callback(stop_process, proc)
        print(f"  started {name} (pid {proc.pid}) at {proc.url}", file=sys.stderr)
        return proc

    def load(self, gateway: ManagedProcess, *loads: Load) -> list[list[RequestResult]]:
        """Run the loads at once (one load generator each); their results, in order."""
        running = []
        for load in loads:
            self.stages += 1
            out = self.folder / f"stage{self.stages}-{load.model}.jsonl"
            argv = ["--base-url", f"{gateway.url}/v1", "--workload", str(self.workload),
                    "--model", load.model, "--duration", f"{load.duration_s:g}",
                    "--out", str(out), "--timeout-s", "60"]  # fmt: skip
            if load.rate_per_s is not None:
                argv += ["--mode", "open", "--time-scale", f"{load.rate_per_s:g}"]
            else:
                argv += ["--mode", "closed", "--concurrency", str(load.concurrency),
                         "--start-offset", str(self.stages * 1000)]  # fmt: skip
            popen = subprocess.Popen(
                python_module_argv(_LOADGEN, *argv), stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            running.append((popen, out, load))
        results = []
        for popen, out, load in running:
            try:
                _, err = popen.communicate(timeout=load.duration_s + 120)
            except subprocess.TimeoutExpired:
                popen.kill()
                raise RuntimeError("a load generator ran past its time") from None
            if popen.returncode != 0:
                raise RuntimeError(f"the load generator exited {popen.returncode}: {err[-800:]}")
            with out.open("rb") as source:
                results.append([RequestResult.from_json(line) for line in source if line.strip()])
        return results


def _errors(s: Scenario, name: str = "errors") -> dict[str, Any]:
    faults = ["--error-rate", "0.2", "--error-status", "503", "--seed", "11"]
    roles = {"light": [], "heavy": faults, "heavy-backup": []}
    with s.stack(name, roles) as gateway, ProcessSampler(gateway.pid) as sampler:
        load = Load("heavy", s.args.duration, concurrency=s.args.errors_concurrency)
        [results] = s.load(gateway, load)
    figures = stage_figures(results, s.args.duration)
    return {
        "what": "heavy primary: 20 % HTTP 503 (seeded); healthy heavy backup, retry_on_backup; "
        f"closed loop c={s.args.errors_concurrency}"
        + ("; circuit breakers off" if name == "errors-no-breaker" else ""),
        "stage": figures,
        "gateway": _usage(sampler),
        "target": {"success_rate_min": 0.995},
        "pass": (figures["success_rate"] or 0) >= 0.995,
    }


def _calibrate(s: Scenario, gateway: ManagedProcess, *lanes: str) -> dict[str, dict[str, Any]]:
    """Each lane's capacity: closed loop at its slot count, all lanes at once."""
    slots = {"light": LIGHT_SLOTS, "heavy": HEAVY_SLOTS}
    loads = [Load(lane, s.args.calibration, concurrency=slots[lane]) for lane in lanes]
    runs = s.load(gateway, *loads)
    return {lane: stage_figures(r, s.args.calibration) for lane, r in zip(lanes, runs, strict=True)}


def _isolation(s: Scenario) -> dict[str, Any]:
    with s.stack("isolation", {"light": [], "heavy": []}) as gateway:
        capacity = _calibrate(s, gateway, "heavy")["heavy"]
        heavy_rate = 2 * (capacity["admitted_per_s"] or 1.0)
        light = Load("light", s.args.duration, concurrency=s.args.light_concurrency)
        [idle] = s.load(gateway, light)
        time.sleep(2)
        with ProcessSampler(gateway.pid) as sampler:
            busy, heavy = s.load(
                gateway, light, Load("heavy", s.args.duration, rate_per_s=heavy_rate)
            )
    idle_fig, busy_fig = stage_figures(idle, s.args.duration), stage_figures(busy, s.args.duration)
    p95_idle, p95_busy = idle_fig["latency_ms"]["p95"], busy_fig["latency_ms"]["p95"]
    ratio = p95_busy / p95_idle if p95_idle and p95_busy else None
    return {
        "what": f"light closed loop c={s.args.light_concurrency}; heavy idle, then heavy open "
        f"loop at 2x its measured capacity ({heavy_rate:.1f}/s)",
        "heavy_capacity": capacity,
        "light_heavy_idle": idle_fig,
        "light_heavy_saturated": busy_fig,
        "heavy_saturated": stage_figures(heavy, s.args.duration),
        "light_p95_ratio": None if ratio is None else round(ratio, 3),
        "gateway": _usage(sampler),
        "target": {"light_p95_ratio_max": 1.2},
        "pass": ratio is not None and ratio <= 1.2,
    }


def _overload(s: Scenario) -> dict[str, Any]:
    with s.stack("overload", {"light": [], "heavy": []}) as gateway:
        capacity = _calibrate(s, gateway, "light", "heavy")
        rates = {lane: capacity[lane]["admitted_per_s"] or 1.0 for lane in capacity}
        probe = RetryAfterProbe(gateway.url)
        with ProcessSampler(gateway.pid) as sampler, probe:
            over = s.load(gateway, *(Load(lane, s.args.duration, rate_per_s=2 * rates[lane])
                                     for lane in ("light", "heavy")))  # fmt: skip
        time.sleep(2)
        recovery_s = max(2.0, s.args.duration / 2)
        with ProcessSampler(gateway.pid) as after:
            back = s.load(gateway, *(Load(lane, recovery_s, rate_per_s=rates[lane] / 2)
                                     for lane in ("light", "heavy")))  # fmt: skip
    lanes: dict[str, Any] = {}
    for lane, overloaded, recovered in zip(("light", "heavy"), over, back, strict=True):
        at_capacity = capacity[lane]["latency_ms"]["p95"]
        fig = stage_figures(overloaded, s.args.duration)
        bound = (at_capacity or 0) + QUEUE_TIMEOUT_S[lane] * 1000
        lanes[lane] = {
            "capacity": capacity[lane],
            "overload_2x": fig,
            "recovery_half": stage_figures(recovered, recovery_s),
            "admitted_p95_vs_capacity_p95": _ratio(fig["latency_ms"]["p95"], at_capacity),
            "sla_p95_bound_ms": round(bound, 1),
            "keeps_sla": (fig["latency_ms"]["p95"] or 0) <= bound,
        }
    recovered_ok = all(
        (lanes[lane]["recovery_half"]["success_rate"] or 0) >= 0.999 for lane in lanes
    )
    return {
        "what": "both lanes open loop at 2x their measured capacity, then at 0.5x",
        "lanes": lanes,
        "refusals_probed": probe.summary(),
        "gateway_overload": _usage(sampler),
        "gateway_recovery": _usage(after),
        "recovered": recovered_ok,
        "pass": recovered_ok
        and all(lane["keeps_sla"] for lane in lanes.values())
        and probe.summary()["refused_without_retry_after"] == 0,
    }


class RetryAfterProbe:
    """While overloaded, a request every 0.2 s: is every refusal a 429/503 with Retry-After?"""

    def __init__(self, url: str) -> None:
        self._url = url + "/v1/chat/completions"
        self._stop = threading.Event()
        self._seen: list[tuple[int, str | None]] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RetryAfterProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        body = orjson.dumps({"model": "heavy", "max_tokens": 8,
                             "messages": [{"role": "user", "content": "probe"}]})  # fmt: skip
        while not self._stop.wait(0.2):
            headers = {"Content-Type": "application/json"}
            request = urllib.request.Request(self._url, data=body, method="POST", headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    self._seen.append((response.status, None))
            except urllib.error.HTTPError as exc:
                self._seen.append((exc.code, exc.headers.get("Retry-After")))
            except OSError:
                self._seen.append((0, None))

    def summary(self) -> dict[str, int]:
        refused = [(s, ra) for s, ra in self._seen if s in (429, 503)]
        return {
            "probes": len(self._seen),
            "refused": len(refused),
            "refused_without_retry_after": sum(1 for _, ra in refused if not ra),
            "other_errors": sum(1 for s, _ in self._seen if s not in (200, 429, 503)),
        }


def _usage(sampler: ProcessSampler) -> dict[str, float | None]:
    try:
        usage = sampler.usage
    except RuntimeError:  # the block it sampled raised
        return {}
    return {"cpu_s": round(usage.cpu_s, 2), "peak_rss_mib": round(usage.peak_rss_mib, 1),
            "rss_hwm_mib": usage.rss_hwm_mib and round(usage.rss_hwm_mib, 1)}  # fmt: skip


def _ratio(num: float | None, den: float | None) -> float | None:
    return round(num / den, 3) if num is not None and den else None


def _errors_no_breaker(s: Scenario) -> dict[str, Any]:
    return _errors(s, "errors-no-breaker")


_SCENARIOS = {
    "errors": _errors,
    "errors-no-breaker": _errors_no_breaker,
    "isolation": _isolation,
    "overload": _overload,
}
