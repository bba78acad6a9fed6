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

``emit_later`` takes a line whose formatting waits for its chunk (the request line, see
logs.py's ``RequestLines``): the entry keeps its place among the formatted lines, and ``render``
makes its text when the chunk is written.

``interval_s`` 0 writes every line at once (the stdlib ``StreamHandler``'s behaviour).  No line
is dropped while the process runs and exits normally; one killed with SIGKILL loses at most
``interval_s`` of INFO lines, whose requests the request log's journal still holds.
"""

from __future__ import annotations

import logging
import threading
from typing import IO, Any

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
        self._lines: list[Any] = []  # formatted lines, and entries for ``render``
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

    def emit_later(self, entry: object) -> None:
        """A line below WARNING whose text ``render(entry)`` makes when its chunk is written.

        The caller has checked that this handler is where the line goes (no filter or other
        handler to see a ``LogRecord`` first): the record, its handling and the formatting
        leave the request's path, and the text is the one ``emit`` would have written."""
        with self.lock:  # type: ignore[union-attr]  # created by Handler.__init__
            lines = self._lines
            lines.append(entry)
            if self.interval_s <= 0 or len(lines) >= self._max_lines:
                self._write(None)

    def render(self, entry: Any) -> str:
        """The text of an ``emit_later`` entry (a subclass that calls ``emit_later`` says how)."""
        raise NotImplementedError

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
        """Lines not yet written (formatted, or waiting for ``render``)."""
        return len(self._lines)

    def _write(self, record: logging.LogRecord | None) -> None:
        lines, self._lines = self._lines, []
        texts = [line if type(line) is str else self._render(line) for line in lines]
        if "" in texts:  # an entry that failed to render (reported) leaves no empty line
            texts = [text for text in texts if text]
            if not texts:
                return
        chunk = self.terminator.join(texts) + self.terminator
        try:
            self.stream.write(chunk)
            self.stream.flush()
        except RecursionError:
            raise
        except Exception:  # a closed or broken stderr must not break a request
            if record is not None:
                self.handleError(record)

    def _render(self, entry: object) -> str:
        try:
            return self.render(entry)
        except Exception:  # logging's contract: report, never raise; the other lines go out
            self.handleError(logging.makeLogRecord({"msg": "unrendered line", "args": None}))
            return ""

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self._lines:
                self.flush()
