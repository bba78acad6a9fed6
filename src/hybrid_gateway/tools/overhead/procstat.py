"""CPU time and resident memory of one process and its children, read from ``/proc`` (psutil
elsewhere).

A process's children are counted with it (``serve --workers N``: a parent that only waits, and
N workers that serve): CPU and RSS are summed over the process and the descendants alive when a
level starts, which are read again when it stops.

``ProcessSampler`` brackets one load level: a CPU snapshot when it starts, another when it
stops, and a background thread that samples RSS every ``interval_s`` so we can report the peak
during the level (``VmHWM`` alone would be the peak since the process started).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

__all__ = ["ProcessSampler", "ProcessSnapshot", "ProcessUsage", "process_tree", "read_process"]

_MIB = 1024 * 1024


@dataclass(frozen=True)
class ProcessSnapshot:
    """User + system CPU seconds consumed so far, current RSS, and the RSS high-water mark."""

    cpu_s: float
    rss_bytes: int
    rss_hwm_bytes: int | None


@dataclass(frozen=True)
class ProcessUsage:
    """What one process used while a load level ran."""

    cpu_s: float
    peak_rss_mib: float
    rss_hwm_mib: float | None
    samples: int


def read_process(pid: int) -> ProcessSnapshot:
    """One snapshot of ``pid``; raises ``ProcessLookupError`` if it is gone."""
    proc = Path("/proc") / str(pid)
    if Path("/proc/self/stat").exists():
        try:
            return _read_linux(proc)
        except FileNotFoundError as exc:
            raise ProcessLookupError(pid) from exc
    return _read_psutil(pid)


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants alive now, parents first (just ``pid`` without ``/proc``)."""
    if not Path("/proc/self/stat").exists():
        return [pid]
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])  # field 4 of proc(5)
        parents.setdefault(parent, []).append(int(entry.name))
    tree, todo = [pid], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        tree += children
        todo += children
    return tree


def _alone(pid: int) -> list[int]:
    return [pid]


def read_tree(pids: list[int]) -> ProcessSnapshot:
    """The sum over ``pids`` (the first must be alive; a child gone meanwhile counts 0)."""
    first = read_process(pids[0])
    cpu, rss, hwm = first.cpu_s, first.rss_bytes, first.rss_hwm_bytes
    for pid in pids[1:]:
        try:
            snap = read_process(pid)
        except ProcessLookupError:
            continue
        cpu, rss = cpu + snap.cpu_s, rss + snap.rss_bytes
        if hwm is not None and snap.rss_hwm_bytes is not None:
            hwm += snap.rss_hwm_bytes
    return ProcessSnapshot(cpu_s=cpu, rss_bytes=rss, rss_hwm_bytes=hwm)


def _read_linux(proc: Path) -> ProcessSnapshot:
    stat = (proc / "stat").read_text()
    # The command name (field 2) is in parentheses and may contain spaces: split after it.
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    rss_kib = hwm_kib = None
    for line in (proc / "status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kib = int(line.split()[1])
        elif line.startswith("VmHWM:"):
            hwm_kib = int(line.split()[1])
    return ProcessSnapshot(
        cpu_s=(utime + stime) / ticks,
        rss_bytes=(rss_kib or 0) * 1024,
        rss_hwm_bytes=None if hwm_kib is None else hwm_kib * 1024,
    )


def _read_psutil(pid: int) -> ProcessSnapshot:
    try:
        import psutil
    except ImportError as exc:  # pragma: no cover - Linux always has /proc
        raise RuntimeError(
            "no /proc here: install psutil (pip install 'hybrid-gateway[bench]')"
        ) from exc
    try:
        proc = psutil.Process(pid)
        times = proc.cpu_times()
        rss = int(proc.memory_info().rss)
    except psutil.NoSuchProcess as exc:
        raise ProcessLookupError(pid) from exc
    return ProcessSnapshot(
        cpu_s=float(times.user + times.system), rss_bytes=rss, rss_hwm_bytes=None
    )


class ProcessSampler:
    """Context manager: CPU delta and peak RSS of ``pid`` and its children between enter and
    exit."""

    def __init__(self, pid: int, interval_s: float = 0.1, *, children: bool = True) -> None:
        self._pid = pid
        self._tree = process_tree if children else _alone
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start: ProcessSnapshot | None = None
        self._peak_rss = 0
        self._samples = 0
        self._usage: ProcessUsage | None = None
        self._pids = [pid]

    def __enter__(self) -> ProcessSampler:
        self._pids = self._tree(self._pid)
        self._start = read_tree(self._pids)
        self._peak_rss = self._start.rss_bytes
        self._samples = 1
        self._thread = threading.Thread(
            target=self._sample_loop, name=f"rss-{self._pid}", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if exc_type is not None or self._start is None:
            return
        # a child started during the level counts whole (all its CPU is the level's); one that
        # ended during it loses what it used (workers do neither while a level runs)
        self._pids = self._tree(self._pid)
        end = read_tree(self._pids)
        self._observe(end.rss_bytes)
        self._usage = ProcessUsage(
            cpu_s=end.cpu_s - self._start.cpu_s,
            peak_rss_mib=self._peak_rss / _MIB,
            rss_hwm_mib=None if end.rss_hwm_bytes is None else end.rss_hwm_bytes / _MIB,
            samples=self._samples,
        )

    @property
    def usage(self) -> ProcessUsage:
        if self._usage is None:
            raise RuntimeError("ProcessSampler.usage is available after the with-block exits")
        return self._usage

    def _sample_loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._observe(read_tree(self._pids).rss_bytes)
            except ProcessLookupError:
                return

    def _observe(self, rss_bytes: int) -> None:
        # Only this thread and, after join(), __exit__ write these: no lock needed.
        self._peak_rss = max(self._peak_rss, rss_bytes)
        self._samples += 1
