"""`serve --workers N`: N gateway processes on one port, started and stopped by this parent.

Each worker is an ordinary `serve` process bound with ``SO_REUSEPORT``, so the kernel spreads
new connections over them; no request passes through the parent.  The parent:

* holds the port with its own ``SO_REUSEPORT`` socket while the workers start (so ``--port 0``
  picks one free port for all of them), never listening on it;
* starts worker 0 first and waits for it to be up (it replays request-log journals left by a
  crash, which the others must not replay at the same time), then the rest;
* prints ``gateway listening on http://HOST:PORT`` once every worker listens;
* on SIGTERM/SIGINT sends SIGTERM to every worker: each closes its socket, finishes in-flight
  requests within ``--grace-s`` (cancelling the rest: api/drain.py), flushes its request log
  and exits; the parent waits for them;
* a port it cannot bind raises ``ListenError`` (``serve`` prints one line and exits 2);
* if a worker dies on its own, stops the others and exits 1 (a process manager restarts it).

Workers share the request log's SQLite file (WAL); each writes its own journal files (named by
pid, held by ``flock``), so they never contend for a journal.  State that must be shared
between workers (rate limits, budgets, breakers, caches, results) needs ``stores.backend:
redis``: with ``memory`` every worker keeps its own, as separate replicas would.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from types import FrameType
from typing import IO

from hybrid_gateway.serving import ListenError, os_reason
from hybrid_gateway.tools.processes import LISTENING_RE

__all__ = ["run_workers"]

_START_TIMEOUT_S = 60.0


def run_workers(argv: list[str], workers: int, host: str, port: int, grace_s: float) -> int:
    """Run ``workers`` copies of ``serve`` (``argv`` minus host/port/workers) until signalled."""
    holder = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        holder.bind((host, port))
    except OSError as exc:
        holder.close()
        raise ListenError(f"cannot listen on {host}:{port}: {os_reason(exc)}") from None
    port = int(holder.getsockname()[1])
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    children: list[subprocess.Popen[str]] = []
    try:
        for _ in range(workers):
            child = _spawn([*argv, "--host", host, "--port", str(port), "--worker-process"])
            children.append(child)
            if not _wait_listening(child, stop) or stop.is_set():
                return 1 if not stop.is_set() else 0
        holder.close()
        shown = f"[{host}]" if ":" in host else host
        print(f"gateway listening on http://{shown}:{port} ({workers} workers)", flush=True)
        while not stop.wait(0.2):
            if any(child.poll() is not None for child in children):
                print("a gateway worker exited; stopping the others", file=sys.stderr, flush=True)
                return 1
        return 0
    finally:
        holder.close()
        _stop_all(children, grace_s)


def _spawn(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "hybrid_gateway.cli", *argv],
        stdout=subprocess.PIPE, text=True, bufsize=1,
    )  # fmt: skip


def _wait_listening(child: subprocess.Popen[str], stop: threading.Event) -> bool:
    """Wait for the worker's listening line, then keep relaying its output in a thread."""
    assert child.stdout is not None
    found = threading.Event()

    def relay(stream: IO[str]) -> None:
        for line in stream:
            if not found.is_set() and LISTENING_RE.search(line):
                found.set()
                continue  # the parent announces the port once, for all workers
            sys.stdout.write(line)
            sys.stdout.flush()
        found.set()

    threading.Thread(target=relay, args=(child.stdout,), daemon=True).start()
    deadline = time.monotonic() + _START_TIMEOUT_S
    while not found.wait(0.1):
        if stop.is_set() or time.monotonic() > deadline:
            return False
    return child.poll() is None


def _stop_all(children: list[subprocess.Popen[str]], grace_s: float) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s + 5
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
