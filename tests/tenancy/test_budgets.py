"""Budget periods turn over by the calendar of the tenant's time zone; spend is rebuilt from the
request log after a restart.  Instants are given explicitly (the injected wall clock)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from hybrid_gateway.observability.request_log import SqliteRequestLog
from hybrid_gateway.tenancy.budgets import BudgetBook
from hybrid_gateway.tenancy.settings import BudgetConfig
from hybrid_gateway.types import RequestRecord


def at(text: str) -> float:
    """An ISO instant with its offset, as epoch seconds."""
    return datetime.fromisoformat(text).timestamp()


def test_daily_cap_across_a_day_boundary() -> None:
    book = BudgetBook({"acme": BudgetConfig(daily=1.0)})
    book.debit("acme", 0.6, at("2026-11-29T10:00:00+00:00"))
    assert book.exceeded("acme", at("2026-11-29T10:00:01+00:00")) is None
    book.debit("acme", 0.4, at("2026-11-29T23:59:59+00:00"))
    assert book.exceeded("acme", at("2026-11-29T23:59:59.500+00:00")) == "daily"
    assert book.exceeded("acme", at("2026-11-30T00:00:00+00:00")) is None  # a new day
    assert book.spent("acme", at("2026-11-30T00:00:00+00:00")) == pytest.approx((0.0, 1.0))


def test_monthly_cap_across_a_month_boundary() -> None:
    book = BudgetBook({"acme": BudgetConfig(daily=5.0, monthly=2.0)})
    book.debit("acme", 1.5, at("2026-11-29T12:00:00+00:00"))
    book.debit("acme", 0.5, at("2026-11-30T12:00:00+00:00"))  # next day: the day resets ...
    assert book.spent("acme", at("2026-11-30T12:00:01+00:00")) == pytest.approx((0.5, 2.0))
    assert book.exceeded("acme", at("2026-11-30T23:00:00+00:00")) == "monthly"  # ... not the month
    assert book.exceeded("acme", at("2026-12-01T00:00:00+00:00")) is None
    assert book.spent("acme", at("2026-12-01T00:00:00+00:00")) == (0.0, 0.0)


def test_periods_turn_over_in_the_tenants_time_zone() -> None:
    book = BudgetBook({"cn": BudgetConfig(daily=1.0, timezone="Asia/Shanghai"),
                       "utc": BudgetConfig(daily=1.0)})  # fmt: skip
    for tenant in ("cn", "utc"):
        book.debit(tenant, 1.0, at("2026-11-29T15:00:00+00:00"))  # 23:00 in Shanghai
    after = at("2026-11-29T16:00:00+00:00")  # midnight in Shanghai, still the 29th in UTC
    assert book.exceeded("cn", after) is None
    assert book.exceeded("utc", after) == "daily"


def test_a_late_debit_counts_in_the_period_its_request_started() -> None:
    book = BudgetBook({"acme": BudgetConfig(daily=1.0, monthly=10.0)})
    book.exceeded("acme", at("2026-11-30T00:00:05+00:00"))  # the book is on the 30th now
    book.debit("acme", 0.7, at("2026-11-29T23:59:50+00:00"))  # started yesterday: month only
    assert book.spent("acme", at("2026-11-30T00:00:06+00:00")) == pytest.approx((0.0, 0.7))
    book.exceeded("acme", at("2026-12-01T00:00:05+00:00"))
    book.debit("acme", 0.7, at("2026-11-30T23:59:50+00:00"))  # last month: nowhere
    assert book.spent("acme", at("2026-12-01T00:00:06+00:00")) == (0.0, 0.0)


def test_a_zero_cap_is_always_reached_and_tenants_without_budget_never() -> None:
    book = BudgetBook({"frozen": BudgetConfig(monthly=0.0)})
    now = at("2026-11-29T10:00:00+00:00")
    assert book.exceeded("frozen", now) == "monthly"
    assert book.exceeded("free", now) is None
    book.debit("free", 5.0, now)
    assert book.spent("free", now) == (0.0, 0.0)


def _record(request_id: str, tenant: str, ts: str, cost: float) -> RequestRecord:
    record = RequestRecord(request_id=request_id, started_at=at(ts), tenant=tenant)
    record.cost_usd = cost
    return record


def test_spend_is_rebuilt_from_the_request_log(tmp_path: Path) -> None:
    path = tmp_path / "requests.sqlite3"
    log = SqliteRequestLog(path, flush_interval_s=60)
    for record in [
        _record("r1", "acme", "2026-10-31T23:00:00+00:00", 9.0),  # last month
        _record("r2", "acme", "2026-11-28T10:00:00+00:00", 0.25),  # this month
        _record("r3", "acme", "2026-11-29T01:00:00+00:00", 0.5),  # today
        _record("r4", "beta", "2026-11-29T02:00:00+00:00", 7.0),  # another tenant
    ]:
        log.write(record)
    log.close()  # a clean stop; a crash would be replayed from the journal at the next open

    reopened = SqliteRequestLog(path, flush_interval_s=60)
    book = BudgetBook({"acme": BudgetConfig(daily=0.5, monthly=5.0)})
    now = at("2026-11-29T12:00:00+00:00")
    book.rebuild(reopened.query, now)
    reopened.close()
    assert book.spent("acme", now) == pytest.approx((0.5, 0.75))
    assert book.exceeded("acme", now) == "daily"
