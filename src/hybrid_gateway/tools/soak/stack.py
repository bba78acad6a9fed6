"""The processes a soak runs against: two emulators and a gateway set up for churn.

The light emulator injects random errors and connection resets (retries hide most); two more
lanes fail in scripted ways on every request: ``midstream`` sends part of the answer and drops
the connection, ``dead`` drops it before any byte (so its breaker opens, half-opens and opens
again all run long).  The exact cache is small and short-lived, so unique prompts keep evicting
and expiring entries: a cache that only grows would read as a leak.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from hybrid_gateway.tools.processes import (
    ManagedProcess,
    python_module_argv,
    start_process,
    stop_process,
)

__all__ = ["SoakStack", "gateway_config", "start_stack"]

# The fault mix of the light emulator (per request); the breaker's error_rate sits well above.
LIGHT_FAULTS = ("--error-rate", "0.02", "--reset-rate", "0.02")


@dataclass(frozen=True)
class SoakStack:
    gateway: ManagedProcess
    emulators: dict[str, ManagedProcess]

    @property
    def upstream_ports(self) -> frozenset[int]:
        return frozenset(int(urlsplit(p.url).port or 80) for p in self.emulators.values())


def gateway_config(light_url: str, heavy_url: str, run_dir: Path) -> dict[str, Any]:
    def channel(url: str, model: str, **extra: Any) -> dict[str, Any]:
        return {"base_url": url + "/v1", "model": model, "price_per_1m_input": 0.5,
                "price_per_1m_output": 1.5, "timeout_s": 20, **extra}  # fmt: skip

    lanes = ("light", "heavy", "midstream", "dead")
    return {
        "server": {"host": "127.0.0.1", "port": 0,
                   "request_log": {"path": str(run_dir / "requests.sqlite3")}},
        "channels": {
            "light": channel(light_url, "light-model"),
            "heavy": channel(heavy_url, "heavy-model"),
            "midstream": channel(light_url, "m@midstream-reset"),
            "dead": channel(light_url, "m@reset", connect_timeout_s=1),
        },
        "lanes": {name: {"channel": name} for name in lanes},
        "models": [{"id": "auto"}, *({"id": name, "lane": name} for name in lanes)],
        "routing": {"default_lane": "heavy", "rules": [
            {"name": "short", "when": {"max_chars": 60}, "lane": "light"}]},
        "cache": {"exact": {"enabled": True, "ttl_s": 30, "max_entries": 300}},
        "resilience": {
            "retry": {"backoff_s": [0.05, 0.1], "max_retry_after_s": 0.2},
            "breaker": {"window_s": 10, "min_requests": 10, "error_rate": 0.6, "open_s": 5},
        },
    }  # fmt: skip


@contextlib.contextmanager
def start_stack(args: argparse.Namespace, run_dir: Path) -> Iterator[SoakStack]:
    """Start everything; stop everything on the way out, whatever happened."""
    logs = run_dir / "logs"
    with contextlib.ExitStack() as stack:

        def started(process: ManagedProcess) -> ManagedProcess:
            stack.callback(stop_process, process)
            return process

        def emulator(name: str, *extra: str) -> ManagedProcess:
            argv = python_module_argv("hybrid_gateway.cli", "emulate", "--host", "127.0.0.1",
                                      "--port", "0", *extra)  # fmt: skip
            return started(start_process(name, argv, logs, args.startup_timeout))

        light = emulator(
            "emulator-light",
            "--profile",
            "light",
            "--model",
            "light-model",
            "--max-output-tokens",
            "64",
            "--seed",
            str(args.seed),
            *LIGHT_FAULTS,
        )
        heavy = emulator("emulator-heavy", "--profile", "heavy", "--model", "heavy-model",
                         "--max-output-tokens", "96")  # fmt: skip
        config_path = run_dir / "gateway.yaml"
        config_path.write_text(
            yaml.safe_dump(gateway_config(light.url, heavy.url, run_dir), sort_keys=False)
        )
        argv = python_module_argv("hybrid_gateway.cli", "serve", "--config", str(config_path))
        gateway = started(start_process("gateway", argv, logs, args.startup_timeout))
        yield SoakStack(gateway, {"light": light, "heavy": heavy})
