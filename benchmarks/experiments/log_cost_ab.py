"""What the console's request lines cost: in-process per line, and per request in a gateway.

    python benchmarks/experiments/log_cost_ab.py [--concurrency 1,20,50] [--rounds 10]

1. One request line through ``observability/logs.py`` into a file: CPU microseconds per line
   for logfmt and JSON at INFO, and at WARNING (the line dropped), best of 3 x 20,000.
2. Two gateways on one zero-delay emulator (the config of ``bench overhead``), one at
   ``--log-level INFO`` and one at ``WARNING``, loaded by wrk in 2 s slices that alternate
   between them ``--rounds`` times per concurrency (the order flips each round), so drift in
   the machine's load hits both alike: gateway CPU microseconds per request, from /proc.
Needs wrk.  Prints one line per figure.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from pathlib import Path

from hybrid_gateway.observability.logs import RequestLines, configure_logging
from hybrid_gateway.tools.cliargs import concurrency_list
from hybrid_gateway.tools.overhead.cli import _write_gateway_config
from hybrid_gateway.tools.overhead.wrk import WrkRun, find_wrk, run_wrk
from hybrid_gateway.tools.processes import python_module_argv, start_process, stop_process
from hybrid_gateway.types import RequestRecord, RouteDecision, Usage

SLICE_S = 2


def per_line(folder: Path) -> None:
    record = RequestRecord("req_0123456789abcdef", 1.0, model="auto", tenant="acme",
                           route=RouteDecision("light", "light-emu", "short-question"),
                           usage=Usage(16, 8), cost_usd=2e-05, latency_ms=3.21)  # fmt: skip
    lines, count = RequestLines(), 20_000
    with (folder / "lines.log").open("w") as sink:
        for fmt, level in (("logfmt", "INFO"), ("json", "INFO"), ("logfmt", "WARNING")):
            configure_logging(fmt, level, sink)  # type: ignore[arg-type]
            best = float("inf")
            for _ in range(3):
                started = time.process_time()
                for _ in range(count):
                    lines.request(record)
                best = min(best, (time.process_time() - started) / count)
            print(f"per line, {fmt} at {level}: {best * 1e6:.2f} us CPU")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def per_request(folder: Path, concurrency: list[int], rounds: int) -> None:
    wrk = find_wrk()
    assert wrk is not None, "wrk is needed (apt-get install wrk)"
    logs = folder / "logs"
    with contextlib.ExitStack() as stack:
        argv = python_module_argv("hybrid_gateway.cli", "emulate", "--profile", "light",
                                  "--zero-delay", "--host", "127.0.0.1", "--port", "0")  # fmt: skip
        emulator = start_process("emulator", argv, logs, 60)
        stack.callback(stop_process, emulator)
        gateways = {}
        for level in ("INFO", "WARNING"):
            config = _write_gateway_config(folder / level, emulator.url)
            argv = python_module_argv("hybrid_gateway.cli", "serve", "--config", str(config),
                                      "--log-level", level)  # fmt: skip
            gateways[level] = start_process(f"gateway-{level}", argv, logs, 60, cwd=config.parent)
            stack.callback(stop_process, gateways[level])
        for conc in concurrency:
            totals = {level: [0.0, 0] for level in gateways}
            for level, process in gateways.items():  # warm-up
                run_wrk(wrk, WrkRun(process.url, conc, 1), folder / "lua")
            for n in range(rounds):
                for level in ("INFO", "WARNING") if n % 2 == 0 else ("WARNING", "INFO"):
                    process = gateways[level]
                    before = cpu_s(process.pid)
                    result = run_wrk(wrk, WrkRun(process.url, conc, SLICE_S), folder / "lua")
                    totals[level][0] += cpu_s(process.pid) - before
                    totals[level][1] += result.requests
            for level, (cpu, requests) in totals.items():
                print(f"concurrency {conc}, gateway at {level}: {requests} requests, "
                      f"{cpu * 1e6 / requests:.0f} us gateway CPU per request, "
                      f"{requests / (rounds * SLICE_S):.0f} requests/s")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=concurrency_list, default=[1, 20, 50])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hg-log-cost-") as tmp:
        per_line(Path(tmp))
        per_request(Path(tmp), args.concurrency, args.rounds)


if __name__ == "__main__":
    main()
