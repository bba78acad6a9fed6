"""Starting and stopping the servers that `bench overhead` drives."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from hybrid_gateway.tools.processes import (
    ProcessStartError,
    child_env,
    start_process,
    stop_process,
)

LISTENS = (
    "import time; print('thing listening on http://127.0.0.1:1234/', flush=True); time.sleep(60)"
)
IGNORES_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('thing listening on http://127.0.0.1:1', flush=True); time.sleep(60)"
)


def test_start_waits_for_the_listening_line_and_stop_terminates(tmp_path: Path) -> None:
    proc = start_process("thing", [sys.executable, "-c", LISTENS], tmp_path, timeout_s=20)
    try:
        assert proc.url == "http://127.0.0.1:1234"
        assert proc.popen.poll() is None
    finally:
        code = stop_process(proc)
    assert code is not None and code != 0  # died of SIGTERM


def test_stop_kills_a_process_that_ignores_sigterm(tmp_path: Path) -> None:
    proc = start_process("stubborn", [sys.executable, "-c", IGNORES_TERM], tmp_path, timeout_s=20)
    assert stop_process(proc, timeout_s=0.5) == -9


def test_a_child_that_exits_early_reports_its_stderr(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import sys; sys.exit('bad config: port')"]
    with pytest.raises(ProcessStartError, match="exited with code 1") as info:
        start_process("broken", argv, tmp_path, timeout_s=20)
    assert "bad config: port" in str(info.value)


def test_a_silent_child_times_out_and_is_stopped(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    with pytest.raises(ProcessStartError, match=r"silent for 0\.5 s"):
        start_process("silent", argv, tmp_path, timeout_s=0.5)


ORPHANING_PARENT = """
import os, sys
from pathlib import Path
from hybrid_gateway.tools.processes import start_process
child = start_process("orphan", [sys.executable, "-c", sys.argv[1]], Path(sys.argv[2]), 20)
print(child.pid, flush=True)
os.kill(os.getpid(), 9)
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"  # a zombie has already stopped


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux-only")
def test_children_stop_when_the_benchmark_is_killed(tmp_path: Path) -> None:
    parent = subprocess.run(
        [sys.executable, "-c", ORPHANING_PARENT, LISTENS, str(tmp_path)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert parent.returncode == -9, parent.stderr
    child_pid = int(parent.stdout.split()[0])
    deadline = time.monotonic() + 10
    while _alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child_pid), "the child outlived its SIGKILLed parent"
