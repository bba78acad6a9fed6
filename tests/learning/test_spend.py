"""The daily spend cap per tenant and stream, on an injected wall clock; the Wilson bound."""

from __future__ import annotations

import pytest

from hybrid_gateway.learning.bound import wilson_upper
from hybrid_gateway.learning.spend import DAY_S, SpendCaps


class Wall:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_cap_holds_and_turns_with_the_day() -> None:
    wall = Wall(10 * DAY_S + 3600)
    caps = SpendCaps({"router": 1.0, "cache": 0.5}, wall)
    held = [caps.reserve("router", "acme", 0.3) for _ in range(5)]
    assert [h is not None for h in held] == [True, True, True, False, False]
    assert caps.reserve("router", "other", 0.3) is not None  # per tenant
    assert caps.reserve("cache", "acme", 0.6) is None  # per stream
    for reservation in held[:3]:
        assert reservation is not None
        caps.settle(reservation, 0.1)  # cheaper than reserved: room again
    assert caps.spent("router", "acme") == pytest.approx(0.3)
    assert caps.reserve("router", "acme", 0.7) is not None
    assert caps.reserve("router", "acme", 0.01) is None
    wall.now = 11 * DAY_S  # midnight UTC
    assert caps.spent("router", "acme") == 0.0
    assert caps.reserve("router", "acme", 1.0) is not None


def test_a_reservation_from_yesterday_is_not_charged_today() -> None:
    wall = Wall(DAY_S - 1)
    caps = SpendCaps({"router": 1.0}, wall)
    reservation = caps.reserve("router", "acme", 0.9)
    assert reservation is not None
    wall.now = DAY_S + 1
    caps.settle(reservation, 0.9)
    assert caps.spent("router", "acme") == 0.0
    assert caps.reserve("router", "acme", 1.0) is not None


def test_a_zero_cap_admits_only_free_audits() -> None:
    caps = SpendCaps({"router": 0.0}, Wall(0.0))
    assert caps.reserve("router", "acme", 0.001) is None
    assert caps.reserve("router", "acme", 0.0) is not None  # the feedback judge costs nothing


def test_wilson_upper_bound() -> None:
    assert wilson_upper(0, 0) == 1.0
    assert wilson_upper(0, 100) == pytest.approx(0.0370, abs=1e-3)
    assert wilson_upper(5, 100) == pytest.approx(0.1118, abs=1e-3)
    assert wilson_upper(100, 100) == pytest.approx(1.0)
    assert wilson_upper(1, 1000) < wilson_upper(1, 100)
