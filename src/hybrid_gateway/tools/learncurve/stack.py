"""The processes one curve runs: a light and a heavy emulator that answer the workload right or
wrong by its labels (quality marks; the engine at near-zero delay, since marks and APGR do not
depend on latency), and a gateway on a config of the curve's own.  Also: sending items through
the gateway, reading its metrics and waiting for its background audits to land.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from hybrid_gateway.tools.bench.client import Client
from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.bench.strategies import FULL_CONFIG
from hybrid_gateway.tools.processes import (
    ManagedProcess,
    python_module_argv,
    start_process,
    stop_process,
)
from hybrid_gateway.tools.workload.schema import WorkloadItem

__all__ = ["FAST", "audit_count", "base_config", "full_config", "metrics", "running", "send"]

# the emulator's engine at near-zero delay (--zero-delay skips the quality marks)
FAST = (
    "--decode-step-ms",
    "0.05",
    "--per-seq-step-ms",
    "0",
    "--per-kilotoken-step-ms",
    "0",
    "--prefill-tps",
    "100000000",
    "--max-num-seqs",
    "256",
)
MODELS = {"light": "light-model", "heavy": "heavy-model"}
JsonDict = dict[str, Any]


def full_config() -> JsonDict:
    """examples/gateway-full.yaml as packaged: its prices, semantic calibration and embedder."""
    loaded: JsonDict = yaml.safe_load(FULL_CONFIG.read_text(encoding="utf-8"))
    return loaded


def base_config(folder: Path, upstreams: Mapping[str, str]) -> JsonDict:
    """Every request to the light lane (no rules, no classifier), caches off, prompts kept
    (``router train --from-log`` learns from the question text), the full config's prices."""
    full = full_config()
    channels = {}
    for lane, name in (("light", "light-local"), ("heavy", "heavy-local")):
        priced = full["channels"][name]
        channels[f"{lane}-emu"] = {
            "base_url": upstreams[lane], "model": MODELS[lane],
            "price_per_1m_input": priced["price_per_1m_input"],
            "price_per_1m_output": priced["price_per_1m_output"],
            "max_concurrency": 64, "timeout_s": 30,
        }  # fmt: skip
    return {
        "server": {"host": "127.0.0.1", "port": 0,
                   "request_log": {"path": str(folder / "requests.sqlite3"),
                                   "flush_interval_ms": 100, "prompts": "full"},
                   "log": {"level": "WARNING"}},
        "channels": channels,
        "lanes": {"light": {"channel": "light-emu"}, "heavy": {"channel": "heavy-emu"}},
        "routing": {"default_lane": "light", "rules": []},
        "cache": {"exact": {"enabled": False}},
        "resilience": {"retry": {"enabled": False}, "breaker": {"enabled": False}},
    }  # fmt: skip


@contextlib.contextmanager
def running(
    folder: Path,
    workload: Path,
    make_config: Callable[[Mapping[str, str]], JsonDict],
    startup_timeout: float = 120.0,
) -> Iterator[ManagedProcess]:
    """Two marking emulators and a gateway on ``make_config(upstreams)``; all stopped on exit."""
    folder.mkdir(parents=True, exist_ok=True)
    logs = folder / "logs"
    with contextlib.ExitStack() as stack:
        upstreams = {}
        for lane in ("light", "heavy"):
            argv = python_module_argv(
                "hybrid_gateway.cli", "emulate", "--profile", lane, "--tier", lane,
                "--model", MODELS[lane], "--host", "127.0.0.1", "--port", "0",
                "--workload", str(workload), *FAST,
            )  # fmt: skip
            process = start_process(f"emulator-{lane}", argv, logs, startup_timeout)
            stack.callback(stop_process, process)
            upstreams[lane] = f"{process.url}/v1"
        config_path = folder / "gateway.yaml"
        config_path.write_text(yaml.safe_dump(make_config(upstreams), sort_keys=False))
        argv = python_module_argv("hybrid_gateway.cli", "serve", "--config", str(config_path))
        gateway = start_process("gateway", argv, logs, startup_timeout, cwd=folder)
        stack.callback(stop_process, gateway)
        yield gateway


def send(
    url: str, items: Sequence[WorkloadItem], concurrency: int, timeout_s: float = 60.0
) -> list[RequestResult]:
    """Each item once through the gateway at ``url``, ``concurrency`` at a time, in order of
    sending (results in the items' order)."""
    return asyncio.run(_send(url, items, concurrency, timeout_s))


async def _send(
    url: str, items: Sequence[WorkloadItem], concurrency: int, timeout_s: float
) -> list[RequestResult]:
    results: list[RequestResult | None] = [None] * len(items)
    queue = iter(enumerate(items))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        client = Client(session, f"{url}/v1", "auto", timeout_s)
        start = time.perf_counter()

        async def worker() -> None:
            for i, item in queue:
                results[i] = await client.send(item, start)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return [r for r in results if r is not None]


def metrics(url: str) -> dict[str, float]:
    """The gateway's /metrics as ``name{labels}`` -> value (a Prometheus text scrape)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[name] = float(value)
    return out


def audit_count(log: Path, kind: str) -> int:
    """Audits of ``kind`` stored so far with a verdict (labels bought)."""
    try:
        with contextlib.closing(sqlite3.connect(log, timeout=10)) as db:
            row = db.execute("SELECT count(verdict) FROM audits WHERE kind = ?", (kind,)).fetchone()
    except sqlite3.OperationalError:  # no audits table yet
        return 0
    return int(row[0])


def settled_audits(log: Path, kind: str, settle_s: float = 1.5, limit_s: float = 30.0) -> int:
    """Wait until no new ``kind`` audit landed for ``settle_s`` (the gateway writes them in the
    background, after the answers); returns their count."""
    deadline = time.monotonic() + limit_s
    last, since = audit_count(log, kind), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        count = audit_count(log, kind)
        if count != last:
            last, since = count, time.monotonic()
        elif time.monotonic() - since >= settle_s:
            break
    return last
