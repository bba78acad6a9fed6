from __future__ import annotations

import random

import pytest

from hybrid_gateway.errors import (
    InvalidRequest,
    Overloaded,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.resilience.retry import RetryBudget, RetryPolicy
from hybrid_gateway.upstreams.openai_http import UpstreamRejected


def policy(**kwargs: object) -> RetryPolicy:
    return RetryPolicy(random.Random(7), **kwargs)  # type: ignore[arg-type]


def test_schedule_with_jitter_bounds() -> None:
    p = policy()
    assert p.max_attempts == 4
    for _ in range(200):
        for retry, base in enumerate((0.2, 0.5, 1.0), start=1):
            wait = p.delay(retry)
            assert wait is not None
            assert base * 0.8 <= wait <= base * 1.2
    assert p.delay(4) is None
    assert p.delay(0) is None


def test_no_jitter_is_the_schedule() -> None:
    p = policy(backoff_s=(0.1, 0.3), jitter=0.0)
    assert [p.delay(1), p.delay(2), p.delay(3)] == [0.1, 0.3, None]


def test_retry_after_honoured_when_longer_and_capped() -> None:
    p = policy(jitter=0.0, max_retry_after_s=5.0)
    assert p.delay(1, Overloaded("429", retry_after_s=2.0, code="upstream_rate_limited")) == 2.0
    assert p.delay(1, Overloaded("429", retry_after_s=60.0, code="upstream_rate_limited")) == 5.0
    # shorter than the backoff: the backoff wins
    assert p.delay(3, Overloaded("429", retry_after_s=0.1, code="upstream_rate_limited")) == 1.0


@pytest.mark.parametrize(
    ("exc", "retryable"),
    [
        (UpstreamUnavailable("x", channel="c", code="upstream_connection_error"), True),
        (UpstreamUnavailable("x", channel="c", code="upstream_status_502"), True),
        (UpstreamUnavailable("x", channel="c", code="upstream_status_503"), True),
        (UpstreamUnavailable("x", channel="c", code="upstream_status_504"), True),
        (UpstreamTimeout("x", channel="c"), True),
        (Overloaded("429", retry_after_s=1, code="upstream_rate_limited"), True),
        (Overloaded("queue full", retry_after_s=1), False),  # the gateway's own lane queue
        (UpstreamUnavailable("x", channel="c", code="upstream_status_500"), False),
        (UpstreamUnavailable("x", channel="c", code="upstream_auth_failed"), False),
        (UpstreamUnavailable("x", channel="c", code="upstream_stream_broken"), False),
        (UpstreamRejected("bad"), False),
        (InvalidRequest("bad"), False),
        (ValueError("bug"), False),
    ],
)
def test_which_errors_are_retryable(exc: BaseException, retryable: bool) -> None:
    assert RetryPolicy.is_retryable(exc) is retryable


def test_budget_refuses_beyond_ratio_and_refills() -> None:
    clock = ManualClock(start=100.0)
    budget = RetryBudget(clock, ratio=0.1, min_per_s=0.0, window_s=10)
    for _ in range(50):
        budget.record_request()
    granted = sum(budget.try_spend() for _ in range(20))
    assert granted == 5  # 10 % of 50 requests
    assert not budget.try_spend()


async def test_budget_refills_as_the_window_moves() -> None:
    clock = ManualClock(start=100.0)
    budget = RetryBudget(clock, ratio=0.1, min_per_s=0.0, window_s=10)
    for _ in range(20):
        budget.record_request()
    assert budget.try_spend() and budget.try_spend()
    assert not budget.try_spend()
    await clock.advance(10.0)  # the old requests and retries left the window
    for _ in range(10):
        budget.record_request()
    assert budget.try_spend()
    assert not budget.try_spend()


async def test_budget_floor_allows_a_few_retries_without_traffic() -> None:
    clock = ManualClock()
    budget = RetryBudget(clock, ratio=0.1, min_per_s=0.5, window_s=10)
    assert sum(budget.try_spend() for _ in range(10)) == 5
    await clock.advance(10.0)
    assert sum(budget.try_spend() for _ in range(10)) == 5
