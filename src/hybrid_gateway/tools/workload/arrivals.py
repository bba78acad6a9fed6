"""When each item arrives: a closed loop, a Poisson process, or the timestamps of a real trace.

``--arrivals`` takes ``closed`` (every offset 0: the bench's clients send as fast as they are
answered), ``poisson:RATE`` (exponential gaps, RATE requests per second) or ``trace:NAME`` with NAME
one of ``sources.TRACE_LOADERS`` (offsets relative to the trace's first row, and its output token
counts).  A trace shorter than the workload is replayed again after its end, shifted by its span
plus its mean gap.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from .sources import TRACE_LOADERS, TraceRow

CLOSED = "closed"
POISSON = "poisson"
TRACE = "trace"


@dataclass(frozen=True, slots=True)
class ArrivalSpec:
    mode: str = CLOSED  # CLOSED, POISSON or TRACE
    rate: float = 0.0  # requests per second, for POISSON
    trace: str = ""  # a TRACE_LOADERS name, for TRACE

    def __str__(self) -> str:
        if self.mode == POISSON:
            return f"{POISSON}:{self.rate:g}"
        return f"{TRACE}:{self.trace}" if self.mode == TRACE else CLOSED


@dataclass(frozen=True, slots=True)
class Arrival:
    offset_ms: float
    output_tokens: int | None = None  # the trace's generated tokens, when replaying one


def parse_arrivals(text: str) -> ArrivalSpec:
    """``closed`` | ``poisson:RATE`` | ``trace:NAME``; raises ValueError with the accepted forms."""
    mode, _, arg = text.strip().partition(":")
    if mode == CLOSED and not arg:
        return ArrivalSpec(CLOSED)
    if mode == POISSON:
        try:
            rate = float(arg)
        except ValueError:
            rate = 0.0
        if rate > 0:
            return ArrivalSpec(POISSON, rate=rate)
    if mode == TRACE and arg in TRACE_LOADERS:
        return ArrivalSpec(TRACE, trace=arg)
    traces = "|".join(f"trace:{name}" for name in TRACE_LOADERS)
    raise ValueError(f"bad --arrivals {text!r}: expected closed|poisson:RATE (RATE > 0)|{traces}")


def make_arrivals(spec: ArrivalSpec, count: int, rng: random.Random, data: Path) -> list[Arrival]:
    if spec.mode == POISSON:
        return poisson_arrivals(spec.rate, count, rng)
    if spec.mode == TRACE:
        return trace_arrivals(TRACE_LOADERS[spec.trace](data), count)
    return [Arrival(0.0)] * count


def poisson_arrivals(rate: float, count: int, rng: random.Random) -> list[Arrival]:
    """The first item at 0, then exponential gaps with mean ``1000 / rate`` ms."""
    offsets: list[Arrival] = []
    now = 0.0
    for index in range(count):
        if index:
            now += rng.expovariate(rate) * 1000.0
        offsets.append(Arrival(round(now, 3)))
    return offsets


def trace_arrivals(rows: list[TraceRow], count: int) -> list[Arrival]:
    if not rows:
        raise ValueError("the arrival trace is empty")
    span = rows[-1].offset_ms - rows[0].offset_ms
    period = span + (span / (len(rows) - 1) if len(rows) > 1 else 1000.0)
    arrivals: list[Arrival] = []
    for index in range(count):
        lap, row = divmod(index, len(rows))
        offset = rows[row].offset_ms - rows[0].offset_ms + lap * period
        arrivals.append(Arrival(round(offset, 3), rows[row].output_tokens))
    return arrivals
