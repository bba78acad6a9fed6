"""A private ``redis-server`` for tests: its own free port, no persistence, killed at the end.

Tests that need a live Redis use this rather than the system one at 6379, so they can stop it
mid-run (the outage tests) and leave nothing behind.  Skips when ``redis-server`` is missing.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

__all__ = ["RedisServer", "free_port", "unique_prefix"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def unique_prefix() -> str:
    return f"hgwtest:{uuid.uuid4().hex[:12]}:"


@dataclass
class RedisServer:
    """``start()`` / ``stop()`` as often as a test needs; the port stays the same."""

    workdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed")
        argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(self.workdir)]  # fmt: skip
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None
