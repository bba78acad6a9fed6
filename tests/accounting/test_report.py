"""`report cost` and the break-even's log shares, over a hand-made request log."""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from hybrid_gateway.accounting.log_source import config_source
from hybrid_gateway.accounting.report import ReportError, cost_report, parse_instant
from hybrid_gateway.accounting.report_cli import render, write_csv
from hybrid_gateway.accounting.report_log import shares_from_log
from hybrid_gateway.cli import main
from hybrid_gateway.config import load_config
from hybrid_gateway.observability.request_log import SqliteRequestLog
from hybrid_gateway.observability.request_log_pg import PostgresRequestLog
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.stores.health import StoreHealth
from hybrid_gateway.stores.postgres import PostgresPool
from hybrid_gateway.types import CacheOutcome, RequestRecord, RouteDecision, Usage

UTC = ZoneInfo("UTC")
T0 = datetime(2026, 11, 20, 12, tzinfo=UTC).timestamp()


def rec(n: int, tenant: str, lane: str, cost: float, *, app: str = "default",
        cache: CacheOutcome = CacheOutcome.MISS, status: int = 200, saved: float | None = None,
        ts: float = T0, tokens: tuple[int, int] = (100, 50)) -> RequestRecord:  # fmt: skip
    record = RequestRecord(request_id=f"r{n}", started_at=ts, tenant=tenant, app=app,
                           model="auto")  # fmt: skip
    record.route = RouteDecision(lane, f"{lane}-ch", "default")
    record.cache, record.status, record.cost_usd = cache, status, cost
    record.usage = Usage(*tokens)
    if saved is not None:
        record.extra["saved_usd"] = saved
    return record


RECORDS = [
    rec(1, "acme", "light", 0.001, app="wiki"),
    rec(2, "acme", "heavy", 0.010, app="wiki", tokens=(300, 200)),
    rec(3, "acme", "light", 0.0, app="crm", cache=CacheOutcome.EXACT, saved=0.002),
    rec(4, "beta", "heavy", 0.020, tokens=(500, 400)),
    rec(5, "beta", "heavy", 0.0, status=502),
    rec(6, "beta", "light", 5.0, ts=T0 - 40 * 86400),  # outside the window
]


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "requests.sqlite3"
    request_log = SqliteRequestLog(path, flush_interval_s=60)
    for record in RECORDS:
        request_log.write(record)
    request_log.close()
    return path


def test_cost_by_tenant(log: Path) -> None:
    report = cost_report(log, T0 - 86400, T0 + 1, ["tenant"])
    acme, beta = report.rows
    assert acme.group == ("acme",) and acme.requests == 3 and acme.cache_hits == 1
    assert acme.cost_usd == pytest.approx(0.011)
    assert acme.cost_per_1k_usd == pytest.approx(0.011 / 3 * 1000)
    assert acme.saved_usd == pytest.approx(0.002)
    assert beta.requests == 2 and beta.answered == 1
    assert beta.cost_per_1k_usd == pytest.approx(10.0)  # errors count as requests of cost 0
    assert report.total.requests == 5
    assert report.total.cost_usd == pytest.approx(0.031)


def test_cost_by_several_dimensions_and_none(log: Path) -> None:
    rows = cost_report(log, T0 - 86400, T0 + 1, ["tenant", "app", "lane"]).rows
    assert [r.group for r in rows] == [
        ("acme", "crm", "light"), ("acme", "wiki", "heavy"), ("acme", "wiki", "light"),
        ("beta", "default", "heavy"),
    ]  # fmt: skip
    whole = cost_report(log, 0, T0 + 1, [])
    assert len(whole.rows) == 1 and whole.total.requests == 6
    empty = cost_report(log, T0 + 10, T0 + 20, [])
    assert empty.rows == () and empty.total.requests == 0
    with pytest.raises(ReportError, match="unknown --by"):
        cost_report(log, 0, 1, ["colour"])
    with pytest.raises(ReportError, match="no request log"):
        cost_report(log.with_name("nothing.sqlite3"), 0, 1, [])


def test_table_and_csv(log: Path, tmp_path: Path) -> None:
    report = cost_report(log, T0 - 86400, T0 + 1, ["tenant", "lane"])
    table = render(report)
    assert "cost_per_1k_usd" in table.splitlines()[1]
    assert table.splitlines()[-1].startswith("total")
    out = tmp_path / "out" / "cost.csv"
    write_csv(out, report)
    with out.open() as handle:
        rows = list(csv.DictReader(handle))
    assert rows[0]["tenant"] == "acme" and rows[0]["lane"] == "heavy"
    assert float(rows[0]["cost_usd"]) == 0.01  # full precision in the CSV


def test_instants() -> None:
    now = T0
    assert parse_instant("7d", now, UTC) == now - 7 * 86400
    assert parse_instant("12h", now, UTC) == now - 12 * 3600
    assert parse_instant("2w", now, UTC) == now - 14 * 86400
    assert parse_instant("2026-11-01", now, UTC) == datetime(2026, 11, 1, tzinfo=UTC).timestamp()
    shanghai = parse_instant("2026-11-01", now, ZoneInfo("Asia/Shanghai"))
    assert shanghai == datetime(2026, 10, 31, 16, tzinfo=UTC).timestamp()
    assert parse_instant("2026-11-01T00:00:00+00:00", now, ZoneInfo("Asia/Shanghai")) == (
        datetime(2026, 11, 1, tzinfo=UTC).timestamp()
    )
    with pytest.raises(ReportError, match="7d"):
        parse_instant("last week", now, UTC)


def test_shares_from_log(log: Path) -> None:
    shares = shares_from_log(log, T0 - 86400, T0 + 1)
    # successful: r1 light, r2 heavy, r3 a cache hit, r4 heavy (r5 failed, r6 outside)
    assert (shares.requests, shares.cache_hits) == (4, 1)
    assert (shares.light_requests, shares.heavy_requests) == (1, 2)
    assert shares.heavy_share == pytest.approx(2 / 3)
    assert shares.cache_hit_rate == pytest.approx(0.25)
    assert shares.tokens_in == pytest.approx(300) and shares.tokens_out == pytest.approx(650 / 3)
    with pytest.raises(ReportError, match="no request"):
        shares_from_log(log, T0 + 10, T0 + 20)


def test_report_cli_errors(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "cost", "--log", str(log), "--since", "soon"]) == 2
    assert "7d" in capsys.readouterr().err
    assert main(["report", "cost", "--since", "1d"]) == 2
    assert "--config" in capsys.readouterr().err
    assert main(["report", "cost", "--log", str(log), "--since", "2026-01-01", "--by", "app"]) == 0
    out = capsys.readouterr().out
    assert "wiki" in out and "crm" in out


def test_breakeven_needs_tokens_without_a_log(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "breakeven", "--api-price-in", "2", "--api-price-out", "8",
            "--heavy-share", "0.2", "--gpu-hourly-usd", "2"]  # fmt: skip
    assert main(argv) == 2
    assert "--from-log" in capsys.readouterr().err


def test_breakeven_from_log_fills_what_the_command_line_left_out(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "breakeven", "--from-log", str(log), "--since", "2026-01-01",
            "--api-price-in", "2", "--api-price-out", "8", "--gpu-hourly-usd", "2",
            "--tokens-out", "1000"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("from log        5 requests: 1 cache hits, light 2, heavy 2")
    assert "heavy 50.0% of 80.0% cache misses" in out


def test_the_shared_postgres_log_gives_the_same_report(
    log: Path, tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``stores.records: postgres``: the same rows in PostgreSQL give the same figures."""
    pool = PostgresPool(postgres_url, size=1, timeout_ms=2000,
                        health=StoreHealth(ManualClock(), retry_s=1.0))  # fmt: skip
    shared = PostgresRequestLog(tmp_path / "journal", pool, flush_interval_s=60,
                                other_writers_s=0.0)  # fmt: skip
    for record in RECORDS:
        shared.write(record)
    shared.close()
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "channels: {a: {base_url: 'http://127.0.0.1:1/v1', model: m}}\n"
        "lanes: {light: {channel: a}, heavy: {channel: a}}\n"
        f"stores: {{records: postgres, postgres_url: '{postgres_url}'}}\n"
    )
    by = ["tenant", "lane", "cache", "status", "day"]
    with config_source(load_config(config), config) as source:
        assert cost_report(source, T0 - 86400, T0 + 1, by) == cost_report(
            log, T0 - 86400, T0 + 1, by
        )
        assert shares_from_log(source, T0 - 86400, T0 + 1) == shares_from_log(
            log, T0 - 86400, T0 + 1
        )
    argv = ["report", "cost", "--since", "2026-11-19", "--until", "2026-11-21", "--by", "day"]
    assert main([*argv, "--config", str(config)]) == 0
    from_postgres = capsys.readouterr().out
    assert main([*argv, "--log", str(log)]) == 0
    assert from_postgres == capsys.readouterr().out
    assert "2026-11-20" in from_postgres
