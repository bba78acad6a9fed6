"""Start a server subprocess, wait for its "listening on URL" line, stop it for sure.

The child's stdout and stderr go to files, not pipes: a server that keeps logging after its
listening line would block on a full pipe that nobody drains, which would show up as a
throughput collapse in the benchmark rather than as an error.  We poll the stdout file for the
line instead.  Each child gets its own session (process group) so that stopping it also stops
anything it spawned, and a Ctrl-C in the terminal reaches only us: we then stop the children in
order from our ``finally``.  On Linux each child also asks the kernel for SIGTERM when we die,
so even a SIGKILLed benchmark leaves nothing running.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "LISTENING_RE",
    "ManagedProcess",
    "ProcessStartError",
    "child_env",
    "python_module_argv",
    "start_process",
    "stop_process",
]

# "emulator listening on http://127.0.0.1:4321", "gateway listening on http://...", ...
LISTENING_RE = re.compile(r"listening on (https?://\S+)")

_POLL_S = 0.05


class ProcessStartError(RuntimeError):
    """A child exited or stayed silent before printing its listening line."""


@dataclass(frozen=True)
class ManagedProcess:
    name: str
    popen: subprocess.Popen[bytes]
    url: str
    stdout_path: Path
    stderr_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid


def python_module_argv(module: str, *args: str) -> list[str]:
    """``python -m module args...`` with the interpreter that runs us."""
    return [sys.executable, "-m", module, *args]


def child_env() -> dict[str, str]:
    """Our environment, with the folder holding ``hybrid_gateway`` first on PYTHONPATH.

    Works the same whether the package is installed or run from a source tree with
    ``PYTHONPATH=src``.
    """
    import hybrid_gateway

    package_parent = str(Path(hybrid_gateway.__file__).resolve().parent.parent)
    env = dict(os.environ)
    parts = [package_parent, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def start_process(
    name: str, argv: Sequence[str], log_dir: Path, timeout_s: float, cwd: Path | None = None
) -> ManagedProcess:
    """Start ``argv`` and return once it printed ``listening on URL`` (or raise and stop it)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    stdout_path = log_dir / f"{name}.stdout.log"
    stderr_path = log_dir / f"{name}.stderr.log"
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=cwd,
            env=child_env(),
            start_new_session=True,
            preexec_fn=_die_with_parent_hook(),
        )
    try:
        url = _wait_for_url(name, popen, stdout_path, stderr_path, timeout_s)
    except BaseException:
        _stop_popen(popen, 2.0)
        raise
    return ManagedProcess(name, popen, url, stdout_path, stderr_path)


def _wait_for_url(
    name: str,
    popen: subprocess.Popen[bytes],
    stdout_path: Path,
    stderr_path: Path,
    timeout_s: float,
) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        match = LISTENING_RE.search(stdout_path.read_text(errors="replace"))
        if match:
            return match.group(1).rstrip("/")
        code = popen.poll()
        if code is not None or time.monotonic() > deadline:
            why = f"exited with code {code}" if code is not None else f"silent for {timeout_s:g} s"
            raise ProcessStartError(
                f"{name} {why} before printing 'listening on URL'\n"
                f"  command: {_command_line(popen)}\n"
                f"  stderr tail:\n{_tail(stderr_path)}"
            )
        time.sleep(_POLL_S)


def stop_process(process: ManagedProcess, timeout_s: float = 5.0) -> int | None:
    """SIGTERM, wait up to ``timeout_s``, then SIGKILL. Returns the exit code."""
    return _stop_popen(process.popen, timeout_s)


def _stop_popen(popen: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    if popen.poll() is None:
        _signal_group(popen.pid, signal.SIGTERM)
        try:
            popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(popen.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=timeout_s)
    else:
        # The leader is gone; make sure nothing it started outlives it.
        _signal_group(popen.pid, signal.SIGKILL)
    return popen.returncode


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A pre-exec hook asking the kernel to SIGTERM the child when we die, even by SIGKILL.

    The libc function is looked up here, in the parent: between fork and exec the child must
    not import or allocate much (other threads may hold locks the child inherits).
    """
    if sys.platform != "linux":
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig, sigterm = 1, int(signal.SIGTERM)

    def hook() -> None:
        prctl(pr_set_pdeathsig, sigterm)

    return hook


def _signal_group(pid: int, sig: signal.Signals) -> None:
    # start_new_session=True made the child the leader of a group whose id is its pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _command_line(popen: subprocess.Popen[bytes]) -> str:
    args = popen.args
    if isinstance(args, str | bytes | os.PathLike):
        return str(args)
    return " ".join(str(a) for a in args)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "    (no output)"
    tail = text.splitlines()[-lines:]
    return "\n".join(f"    {line}" for line in tail) or "    (no output)"
