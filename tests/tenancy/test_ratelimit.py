"""Token buckets and the tenant + global chain, on a hand-driven clock (no sleeping)."""

from __future__ import annotations

import pytest

from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.tenancy.ratelimit import RateLimiter, TokenBucket
from hybrid_gateway.tenancy.settings import RateQuota


async def test_burst_then_refill_at_the_rate() -> None:
    clock = ManualClock()
    bucket = TokenBucket(rate=2.0, capacity=3.0, clock=clock)
    for _ in range(3):
        assert bucket.wait_for(1) == 0
        bucket.take(1)
    assert bucket.wait_for(1) == pytest.approx(0.5)  # empty: one token every 1/2 s
    await clock.advance(0.25)
    assert bucket.wait_for(1) == pytest.approx(0.25)
    await clock.advance(0.25)
    assert bucket.wait_for(1) == 0
    await clock.advance(100)
    assert bucket.level == 3.0  # never above capacity


def test_a_request_larger_than_the_bucket_passes_once_it_is_full_and_leaves_debt() -> None:
    clock = ManualClock()
    bucket = TokenBucket(rate=10.0, capacity=100.0, clock=clock)
    assert bucket.wait_for(250) == 0
    bucket.take(250)
    assert bucket.level == -150
    assert bucket.wait_for(1) == pytest.approx(15.1)  # the debt is waited out first


async def test_requests_per_second_with_burst_and_retry_after() -> None:
    clock = ManualClock()
    limiter = RateLimiter({"acme": RateQuota(requests_per_s=0.5, burst=2)}, None, clock)
    assert limiter.admit("acme", 0).allowed
    assert limiter.admit("acme", 0).allowed
    refused = limiter.admit("acme", 0)
    assert not refused.allowed
    assert refused.retry_after_s == pytest.approx(2.0)
    assert refused.limit == "tenant:requests"
    await clock.advance(1.5)
    assert limiter.admit("acme", 0).retry_after_s == pytest.approx(0.5)
    await clock.advance(0.5)
    assert limiter.admit("acme", 0).allowed
    assert limiter.admit("other", 0).allowed  # no quota of its own, no global one


def test_burst_defaults_to_the_rate() -> None:
    clock = ManualClock()
    limiter = RateLimiter({"acme": RateQuota(requests_per_s=3)}, None, clock)
    assert [limiter.admit("acme", 0).allowed for _ in range(4)] == [True, True, True, False]


def test_tokens_per_minute_debit_then_correct_with_real_usage() -> None:
    clock = ManualClock()
    limiter = RateLimiter({"acme": RateQuota(tokens_per_min=600)}, None, clock)  # 10 per s
    assert limiter.counts_tokens("acme") and not limiter.counts_tokens("other")
    assert limiter.admit("acme", 400).allowed
    limiter.correct("acme", 150)  # the answer took 150 more tokens than the prompt estimate
    refused = limiter.admit("acme", 100)
    assert not refused.allowed and refused.limit == "tenant:tokens"
    assert refused.retry_after_s == pytest.approx(5.0)  # 50 left, 100 needed, 10 per s
    limiter.correct("acme", -200)  # e.g. an upstream failure: the estimate is given back
    assert limiter.admit("acme", 100).allowed


async def test_global_refusal_takes_nothing_from_the_tenant() -> None:
    clock = ManualClock()
    limiter = RateLimiter(
        {"acme": RateQuota(requests_per_s=1, burst=5), "beta": RateQuota(requests_per_s=10)},
        RateQuota(requests_per_s=1, burst=2),
        clock,
    )
    assert limiter.admit("beta", 0).allowed
    assert limiter.admit("beta", 0).allowed
    refused = limiter.admit("acme", 0)
    assert not refused.allowed and refused.limit == "global:requests"
    assert refused.retry_after_s == pytest.approx(1.0)
    await clock.advance(2.0)  # the global bucket refills 2; acme still has its full burst of 5
    assert limiter.admit("acme", 0).allowed
    assert limiter.admit("acme", 0).allowed
    assert limiter.admit("acme", 0).limit == "global:requests"


def test_the_longest_wait_is_reported() -> None:
    clock = ManualClock()
    limiter = RateLimiter(
        {"acme": RateQuota(requests_per_s=1, burst=1)}, RateQuota(requests_per_s=0.1, burst=1),
        clock,
    )  # fmt: skip
    assert limiter.admit("acme", 0).allowed
    refused = limiter.admit("acme", 0)
    assert refused.retry_after_s == pytest.approx(10.0) and refused.limit == "global:requests"
