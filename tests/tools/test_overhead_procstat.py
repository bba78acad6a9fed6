"""CPU and RSS sampling of a pid, checked on the test process itself."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from hybrid_gateway.tools.overhead.procstat import ProcessSampler, process_tree, read_process


def burn_cpu(seconds: float) -> int:
    deadline = time.process_time() + seconds
    n = 0
    while time.process_time() < deadline:
        n += 1
    return n


def test_read_process_matches_os_times() -> None:
    before_os = os.times()
    snap = read_process(os.getpid())
    after_os = os.times()
    low = before_os.user + before_os.system
    high = after_os.user + after_os.system
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert low - 2 * tick <= snap.cpu_s <= high + 2 * tick
    assert snap.rss_bytes > 10 * 1024 * 1024  # a Python interpreter with pytest loaded
    assert snap.rss_hwm_bytes is None or snap.rss_hwm_bytes >= snap.rss_bytes


def test_sampler_sees_cpu_burned_and_memory_grown() -> None:
    with ProcessSampler(os.getpid(), interval_s=0.02, children=False) as sampler:
        burn_cpu(0.3)
        ballast = bytearray(64 * 1024 * 1024)
        ballast[::4096] = b"x" * len(ballast[::4096])  # touch every page so it is resident
        time.sleep(0.1)
    usage = sampler.usage
    assert 0.2 <= usage.cpu_s <= 2.0
    assert usage.peak_rss_mib >= 64
    assert usage.samples >= 3
    del ballast


def test_usage_before_exit_is_an_error() -> None:
    sampler = ProcessSampler(os.getpid())
    with pytest.raises(RuntimeError, match="after the with-block"):
        _ = sampler.usage


def test_vanished_process_raises_lookup_error() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    with pytest.raises(ProcessLookupError):
        read_process(child.pid)


_PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
print(child.pid, flush=True)
sys.stdin.readline()  # burn until told to stop, then exit with the child
child.kill()
"""
_BURNER = "import time\nwhile True:\n    pass"


def test_a_process_is_sampled_with_its_children() -> None:
    """``serve --workers N``: the parent waits, the workers burn; the sampler sums them."""
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, _BURNER],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert parent.stdout is not None and parent.stdin is not None
        child = int(parent.stdout.readline())
        assert process_tree(parent.pid) == [parent.pid, child]
        with (
            ProcessSampler(parent.pid, interval_s=0.02) as tree,
            ProcessSampler(parent.pid, interval_s=0.02, children=False) as alone,
        ):
            time.sleep(0.5)
        assert tree.usage.cpu_s >= 0.15  # the burner, on a busy 2-core machine
        assert alone.usage.cpu_s < tree.usage.cpu_s / 2
        assert tree.usage.peak_rss_mib > alone.usage.peak_rss_mib
    finally:
        if parent.stdin is not None:
            parent.stdin.write("\n")
            parent.stdin.close()
        parent.wait(timeout=10)
        if parent.stdout is not None:
            parent.stdout.close()
