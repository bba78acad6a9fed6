"""Does a series keep growing after warm-up?  A robust slope, the noise, and a verdict.

The slope is Theil-Sen's (the median of all pairwise slopes), so a burst of in-flight requests
or one garbage-collection step does not tilt it the way a least-squares fit would.  A series
grows when its fitted growth over the measured window exceeds the largest of: an absolute
floor, a share of its level, and three times its noise (the scaled median absolute deviation
of the residuals).  Both floors are per series: a few MiB of allocator drift or a few sockets
of in-flight variation is noise, a steady climb past them is a leak.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["SERIES", "Tolerance", "Trend", "fit_trend", "theil_sen"]


@dataclass(frozen=True)
class Tolerance:
    unit: str
    absolute: float  # growth over the window allowed whatever the level
    relative: float  # ... or this share of the series' median level


# Sample field -> what growth over the measured window is still noise.
SERIES: Mapping[str, Tolerance] = {
    "rss_mib": Tolerance("MiB", absolute=8.0, relative=0.05),
    "fds": Tolerance("fds", absolute=4.0, relative=0.10),
    "tasks": Tolerance("tasks", absolute=4.0, relative=0.10),
    "upstream_connections": Tolerance("connections", absolute=4.0, relative=0.10),
}


@dataclass(frozen=True)
class Trend:
    name: str
    unit: str
    samples: int
    window_s: float
    median: float
    intercept: float  # of the fit, at t = 0 s of the run
    slope_per_min: float
    growth: float  # slope x window: what the fit says was added over the window
    noise: float
    limit: float
    grows: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def theil_sen(ts: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(slope, intercept): the median pairwise slope, the median of y - slope * t."""
    slopes = [
        (ys[j] - ys[i]) / (ts[j] - ts[i])
        for i in range(len(ts))
        for j in range(i + 1, len(ts))
        if ts[j] != ts[i]
    ]
    slope = statistics.median(slopes) if slopes else 0.0
    intercept = statistics.median(y - slope * t for t, y in zip(ts, ys, strict=True))
    return slope, intercept


def fit_trend(name: str, ts: Sequence[float], ys: Sequence[float], tolerance: Tolerance) -> Trend:
    if len(ts) < 3:
        raise ValueError(f"{name}: {len(ts)} samples after warm-up; at least 3 are needed")
    slope, intercept = theil_sen(ts, ys)
    residuals = [y - (intercept + slope * t) for t, y in zip(ts, ys, strict=True)]
    center = statistics.median(residuals)
    noise = 1.4826 * statistics.median(abs(r - center) for r in residuals)
    window = ts[-1] - ts[0]
    level = statistics.median(ys)
    growth = slope * window
    limit = max(tolerance.absolute, tolerance.relative * abs(level), 3 * noise)
    return Trend(
        name=name, unit=tolerance.unit, samples=len(ts), window_s=round(window, 1),
        median=round(level, 3), intercept=round(intercept, 4), slope_per_min=round(slope * 60, 6),
        growth=round(growth, 3),
        noise=round(noise, 3), limit=round(limit, 3), grows=growth > limit,
    )  # fmt: skip
