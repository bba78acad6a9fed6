"""Small pieces shared by the benchmark commands: argparse types and SIGTERM handling."""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType


def int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return parse


def float_at_least(low: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return parse


def add_process_options(parser: argparse.ArgumentParser, *, plots: str) -> None:
    """``--startup-timeout`` and ``--no-plots``, shared by the commands that start processes."""
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=60.0,
        help="seconds to wait for each process's listening line (60)",
    )
    parser.add_argument(
        "--no-plots", action="store_true", help=f"skip {plots} (no matplotlib needed)"
    )


def concurrency_list(text: str) -> list[int]:
    """A comma list of concurrency levels, each >= 1."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a comma list of integers: {text!r}") from exc
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"concurrency levels must be >= 1: {text!r}")
    return values


@contextlib.contextmanager
def sigterm_stops_the_run() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt for the run, so the children get stopped too."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
