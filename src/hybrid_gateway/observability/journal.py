"""A crash-safe append journal in memory-mapped files, for the request log.

Why mmap: appending a record must cost next to nothing on the event loop, yet survive the
gateway process dying right after it answered.  Bytes copied into a shared file mapping belong
to the kernel's page cache the moment they are copied, so they outlive the process (as an
un-fsynced ``write`` would) without a system call per record.  Measured here: a logged record
costs 2.2 us on the event loop this way, 5.8 us with one ``os.write`` each (which also hands
the GIL to the log's flusher thread at every call).

Files are ``<stem>.journal.<pid>-<tag>.<n>``, preallocated (sparse) to ``capacity`` bytes, one
record per line, the unused tail all zero bytes.  Each file is ``flock``ed while its process
writes it, so a process replaying leftovers at start-up never takes a journal another live
process owns.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(slots=True)
class _Segment:
    path: Path
    fd: int
    map: mmap.mmap
    used: int = 0

    def seal(self) -> Path:
        """Unmap, cut the zero tail and close (which drops the lock); the file stays."""
        self.map.close()
        os.ftruncate(self.fd, self.used)
        os.close(self.fd)
        return self.path


@dataclass(slots=True)
class Retired:
    """Segments a journal no longer writes, not yet sealed: ``seal`` them outside any lock the
    writers take (unmapping and truncating a 16 MiB segment took 0.75 ms p50 here, and a
    truncate can also wait for the kernel's writeback of the file)."""

    segments: list[_Segment]

    def seal(self) -> list[Path]:
        return [segment.seal() for segment in self.segments]


class MmapJournal:
    """Append-only; ``detach`` hands over the segments written so far, ``Retired.seal`` closes
    them into files."""

    def __init__(self, folder: Path, stem: str, capacity: int = 16 * 1024 * 1024) -> None:
        self._folder = folder
        # pid + a random tag: unique even for two journals in one process
        self._prefix = f"{stem}.journal.{os.getpid()}-{os.urandom(4).hex()}."
        self._capacity = capacity
        self._count = 0
        self._full: list[_Segment] = []  # rolled over, waiting for the next detach
        self._current = self._open_segment(capacity)

    def append(self, line: bytes) -> None:
        """Add one record (``line`` holds no newline).  Not thread-safe: callers serialise."""
        segment = self._current
        end = segment.used + len(line) + 1
        if end > len(segment.map):
            self._full.append(segment)  # sealed by the flusher, not on the writer's path
            segment = self._current = self._open_segment(max(self._capacity, len(line) + 1))
            end = len(line) + 1
        segment.map[segment.used : end] = line + b"\n"
        segment.used = end

    def prepare(self) -> _Segment:
        """A fresh segment, opened outside any lock, for ``detach``."""
        return self._open_segment(self._capacity)

    def detach(self, fresh: _Segment) -> Retired:
        """Continue in ``fresh`` at once (no file work); return what was written, to seal."""
        retired = Retired([*self._full, self._current])
        self._full, self._current = [], fresh
        return retired

    def close(self) -> list[Path]:
        retired = Retired([*self._full, self._current])
        self._full = []
        return retired.seal()

    def _open_segment(self, size: int) -> _Segment:
        self._count += 1
        path = self._folder / f"{self._prefix}{self._count}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(fd, size)
        # The first write into a fresh 16 MiB mapping cost 1.7 ms (p50, 300 segments) where the
        # rest cost under 10 us: done here by a system call, which releases the GIL, the
        # writer's first append costs 5 us.  A zero byte: the file still reads as empty.
        os.pwrite(fd, b"\0", 0)
        return _Segment(path, fd, mmap.mmap(fd, size))


def leftover_journals(folder: Path, stem: str) -> Iterator[Path]:
    """Journal files that no live process holds (left by one that died), oldest first."""
    for path in sorted(folder.glob(f"{stem}.journal.*"), key=lambda p: p.stat().st_mtime):
        with contextlib.suppress(FileNotFoundError):
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live process is still writing it
            finally:
                os.close(fd)
            yield path


def journal_lines(path: Path) -> list[bytes]:
    """The records of a journal file, up to its zero tail (the last one may be torn)."""
    data = path.read_bytes().split(b"\0", 1)[0]
    return [line for line in data.split(b"\n") if line]
