"""Real processes for end-to-end tests: emulators and the gateway, on loopback ports."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hybrid_gateway.tools.emulator.settings import profile
from hybrid_gateway.tools.emulator.text import Prompt, PseudoAnswers
from hybrid_gateway.tools.processes import (
    ManagedProcess,
    python_module_argv,
    start_process,
    stop_process,
)


def closed_port() -> int:
    """A loopback port with nothing listening on it (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def emulator(log_dir: Path, name: str, *args: str) -> Iterator[ManagedProcess]:
    argv = python_module_argv("hybrid_gateway.cli", "emulate", "--host", "127.0.0.1",
                              "--port", "0", *args)  # fmt: skip
    process = start_process(name, argv, log_dir, timeout_s=30)
    try:
        yield process
    finally:
        stop_process(process)


@dataclass(frozen=True)
class Gateway:
    process: ManagedProcess
    config_path: Path

    @property
    def url(self) -> str:
        return self.process.url

    @property
    def base_url(self) -> str:
        return self.process.url + "/v1"


def write_config(path: Path, config: Mapping[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    return path


def pool_config(
    pool: Mapping[str, Any], request_log: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A gateway whose one lane, ``light`` (model ``light``), is served by the channel
    ``pool``; no exact cache; the request log off unless ``request_log`` is given."""
    return {
        "server": {"host": "127.0.0.1", "port": 0,
                   "request_log": dict(request_log or {"enabled": False})},
        "channels": {"pool": dict(pool)},
        "lanes": {"light": {"channel": "pool"}},
        "models": [{"id": "light", "lane": "light"}],
        "routing": {"default_lane": "light"},
        "cache": {"exact": {"enabled": False}},
    }  # fmt: skip


def start_gateway(config_path: Path, name: str = "gateway") -> Gateway:
    argv = python_module_argv("hybrid_gateway.cli", "serve", "--config", str(config_path))
    process = start_process(name, argv, config_path.parent / "logs", timeout_s=30)
    return Gateway(process, config_path)


@contextmanager
def gateway(config_path: Path, name: str = "gateway") -> Iterator[Gateway]:
    running = start_gateway(config_path, name)
    try:
        yield running
    finally:
        stop_process(running.process)


def channel(base_url: str, model: str, **extra: Any) -> dict[str, Any]:
    return {"base_url": base_url, "model": model, "price_per_1m_input": 0.5,
            "price_per_1m_output": 1.5, **extra}  # fmt: skip


def long_question(stem: str, min_tokens: int, profile_name: str = "heavy") -> str:
    """A unique question the emulator's ``profile_name`` model answers with >= min_tokens.

    The emulator picks each answer's natural length from a hash of the prompt; tests that need
    an answer still streaming a while later ask one of these instead of leaving it to chance.
    """
    settings = profile(profile_name)
    answers = PseudoAnswers(settings.min_output_tokens, settings.max_output_tokens)
    for _ in range(10_000):
        text = f"{stem} {uuid.uuid4().hex}"
        if answers.target_tokens(Prompt.from_contents([("user", text)])) >= min_tokens:
            return text
    raise AssertionError(f"no question of {min_tokens}+ answer tokens found")
