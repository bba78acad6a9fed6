"""A small Prometheus text-format registry for one event loop.

Why not ``prometheus_client``: it takes a thread lock on every increment and rebuilds a label
key on every ``labels()`` call; profiled under load, that was about a dozen lock round trips and
~60 Python calls per request on the gateway's hot path.  Metrics here are only touched from the
event loop thread, so plain floats suffice, and children are looked up by a label tuple.
Exposition follows the text format 0.0.4 (HELP/TYPE lines, escaped label values, ``le``
buckets with ``+Inf``, ``_sum`` and ``_count``).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence
from typing import TypeVar


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else f"{value:.1f}"


class _Family:
    kind = "untyped"

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        self.name = name
        self.help = help_text
        self.label_names = tuple(labels)

    def header(self) -> Iterator[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} {self.kind}"


class Counter(_Family):
    """Monotonic totals.  The exposed name gets the conventional ``_total`` suffix."""

    kind = "counter"

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labels)
        self.values: dict[tuple[str, ...], float] = {}

    def inc(self, labels: tuple[str, ...] = (), amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def samples(self) -> Iterator[str]:
        for labels, value in sorted(self.values.items()):
            yield f"{self.name}_total{_labels(self.label_names, labels)} {_number(value)}"


class Gauge(_Family):
    kind = "gauge"

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labels)
        self.values: dict[tuple[str, ...], float] = {}

    def set(self, value: float, labels: tuple[str, ...] = ()) -> None:
        self.values[labels] = value

    def samples(self) -> Iterator[str]:
        for labels, value in sorted(self.values.items()):
            yield f"{self.name}{_labels(self.label_names, labels)} {_number(value)}"


class Histogram(_Family):
    kind = "histogram"

    def __init__(
        self, name: str, help_text: str, labels: Sequence[str], buckets: Sequence[float]
    ) -> None:
        super().__init__(name, help_text, labels)
        self.bounds = tuple(sorted(buckets))
        # per label tuple: [count per bucket (non-cumulative, last = +Inf), sum]
        self.series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def observe(self, value: float, labels: tuple[str, ...] = ()) -> None:
        series = self.series.get(labels)
        if series is None:
            series = self.series[labels] = ([0] * (len(self.bounds) + 1), [0.0])
        series[0][bisect.bisect_left(self.bounds, value)] += 1
        series[1][0] += value

    def samples(self) -> Iterator[str]:
        for labels, (counts, total) in sorted(self.series.items()):
            running = 0
            for bound, count in zip((*self.bounds, math.inf), counts, strict=True):
                running += count
                le = _labels(self.label_names, labels, f'le="{_number(bound)}"')
                yield f"{self.name}_bucket{le} {running}"
            yield f"{self.name}_sum{_labels(self.label_names, labels)} {_number(total[0])}"
            yield f"{self.name}_count{_labels(self.label_names, labels)} {running}"


_F = TypeVar("_F", Counter, Gauge, Histogram)


class Registry:
    def __init__(self) -> None:
        self.families: list[Counter | Gauge | Histogram] = []

    def add(self, family: _F) -> _F:
        self.families.append(family)
        return family

    def render(self) -> bytes:
        lines: list[str] = []
        for family in self.families:
            lines.extend(family.header())
            lines.extend(family.samples())
        return ("\n".join(lines) + "\n").encode()
