"""The console handler: lines below WARNING go out in chunks (``server.log.flush_interval_ms``).

A text stream flushes at each line it is given (stderr is line-buffered), so one request line
was one ``write`` system call: with its formatting, a sixth of the pass-through's CPU samples
at INFO (py-spy at wrk -c20; docs/operations.md has the before and after).
``ConsoleHandler`` keeps the formatted lines of INFO and DEBUG records in a list and writes
them as one chunk:

* at once when a WARNING or worse arrives (after the lines before it, so order holds), when
  ``max_lines`` are waiting, and on ``flush()``/``close()`` (``logging.shutdown`` at exit);
* otherwise from a daemon thread every ``interval_s``, so a quiet gateway's last lines wait at
  most that long.

``interval_s`` 0 writes every line at once (the stdlib ``StreamHandler``'s behaviour).  No line
is dropped while the process runs and exits normally; one killed with SIGKILL loses at most
``interval_s`` of INFO lines, whose requests the request log's journal still holds.
"""

from __future__ import annotations

import logging
import threading
from typing import IO

__all__ = ["ConsoleHandler"]

MAX_LINES = 256  # a chunk of request lines: about 100 KB


class ConsoleHandler(logging.StreamHandler[IO[str]]):
    """A ``StreamHandler`` that writes INFO lines in chunks; WARNING and above at once."""

    def __init__(
        self, stream: IO[str], interval_s: float = 0.0, max_lines: int = MAX_LINES
    ) -> None:
        super().__init__(stream)
        self.interval_s = interval_s
        self._max_lines = max_lines
        self._lines: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if interval_s > 0:
            self._thread = threading.Thread(target=self._run, name="console-log", daemon=True)
            self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:  # called under the handler's lock
        try:
            line = self.format(record)
        except Exception:  # logging's contract: report, never raise
            self.handleError(record)
            return
        lines = self._lines
        lines.append(line)
        if (
            self.interval_s <= 0
            or record.levelno >= logging.WARNING
            or len(lines) >= self._max_lines
        ):
            self._write(record)

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]  # created by Handler.__init__
            if self._lines:
                self._write(None)
            else:
                super().flush()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)
        self.flush()
        super().close()

    @property
    def waiting(self) -> int:
        """Lines formatted and not yet written."""
        return len(self._lines)

    def _write(self, record: logging.LogRecord | None) -> None:
        chunk = self.terminator.join(self._lines) + self.terminator
        self._lines = []
        try:
            self.stream.write(chunk)
            self.stream.flush()
        except RecursionError:
            raise
        except Exception:  # a closed or broken stderr must not break a request
            if record is not None:
                self.handleError(record)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self._lines:
                self.flush()
