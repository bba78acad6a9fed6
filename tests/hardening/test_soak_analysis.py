"""The soak's verdict on constructed series: flat noise passes, a steady climb fails."""

from __future__ import annotations

import argparse
import random

import pytest

from hybrid_gateway.tools.soak.analysis import SERIES, Tolerance, fit_trend, theil_sen
from hybrid_gateway.tools.soak.cli import duration, warmup_s

MIB = Tolerance("MiB", absolute=8.0, relative=0.05)


def _series(n: int, slope: float, noise: float, seed: int = 1) -> tuple[list[float], list[float]]:
    rng = random.Random(seed)
    ts = [3.0 * i for i in range(n)]
    return ts, [60 + slope * t + rng.gauss(0, noise) for t in ts]


def test_theil_sen_ignores_outliers() -> None:
    ts = [float(i) for i in range(20)]
    ys = [2.0 * t + 1 for t in ts]
    ys[5], ys[12] = 500.0, -300.0  # a burst and a drop
    assert theil_sen(ts, ys) == pytest.approx((2.0, 1.0))


def test_flat_noisy_series_is_flat() -> None:
    ts, ys = _series(600, slope=0.0, noise=2.0)  # 30 min, every 3 s, +-2 MiB
    trend = fit_trend("rss_mib", ts, ys, MIB)
    assert not trend.grows
    assert abs(trend.growth) < trend.limit


def test_a_steady_leak_is_caught_through_the_noise() -> None:
    ts, ys = _series(600, slope=12 / 1800, noise=2.0)  # 12 MiB over 30 minutes
    trend = fit_trend("rss_mib", ts, ys, MIB)
    assert trend.grows and trend.slope_per_min == pytest.approx(0.4, rel=0.15)


def test_growth_inside_the_noise_band_is_not_a_leak() -> None:
    # A step of in-flight sockets, noisy: more than the floor, less than 3 x the noise.
    ts, ys = _series(100, slope=5 / 300, noise=4.0)
    trend = fit_trend("fds", ts, ys, SERIES["fds"])
    assert trend.limit >= 3 * trend.noise and not trend.grows


def test_too_few_samples_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        fit_trend("fds", [0.0, 1.0], [1.0, 2.0], SERIES["fds"])


@pytest.mark.parametrize(
    ("text", "seconds"), [("30m", 1800), ("2m", 120), ("90s", 90), ("1h", 3600), ("45", 45)]
)
def test_durations(text: str, seconds: float) -> None:
    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-1m", "5 minutes", "m"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        duration(text)


@pytest.mark.parametrize(
    ("total", "given", "expected"),
    [(1800, None, 300), (120, None, 60), (600, None, 150), (40, None, 20), (120, 90, 60)],
)
def test_warmup_defaults_to_a_quarter_within_bounds(
    total: float, given: float | None, expected: float
) -> None:
    args = argparse.Namespace(duration=total, warmup=given)
    assert warmup_s(args) == expected
