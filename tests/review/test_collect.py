from __future__ import annotations

import sqlite3
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pytest

from hybrid_gateway.accounting.report import parse_instant
from hybrid_gateway.cli import main
from hybrid_gateway.config import parse_config
from hybrid_gateway.embedding.base import Vector
from hybrid_gateway.feedback import Reason
from hybrid_gateway.observability.request_log_pg import PostgresRequestLog
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.review.cli import open_reader
from hybrid_gateway.review.collect import (
    REASK_SIMILARITY,
    ReviewError,
    check_mode,
    collect,
    find_reasks,
    reask_candidates,
    want_of,
)
from hybrid_gateway.review.reader import LogReader, Rating
from hybrid_gateway.stores.health import StoreHealth
from hybrid_gateway.stores.postgres import PostgresPool
from tests.review.helpers import config_data, fill_log, logged, write_log, write_yaml

LANES = ("light", "heavy")


def test_reask_window_counts_from_the_answer_and_stays_in_the_tenant() -> None:
    first = logged("q", ts=100.0, latency_ms=2000.0)  # answered at 102.0
    requests = [
        first,
        logged("q", ts=101.0, rid="during"),  # asked before the answer came: not a re-ask of it
        logged("q", ts=161.5, rid="late-ok"),  # 59.5 s after the answer
        logged("q", ts=162.5, rid="too-late"),
        logged("q", ts=103.0, rid="other-tenant", tenant="t2"),
    ]
    requests.sort(key=lambda r: r.ts)
    pairs = reask_candidates(requests)
    names = {(requests[i].request_id, requests[j].request_id) for i, j in pairs}
    assert (first.request_id, "late-ok") in names
    assert (first.request_id, "during") not in names
    assert (first.request_id, "too-late") not in names
    assert all("other-tenant" not in pair for pair in names)


def test_reask_by_equal_text_or_by_similarity() -> None:
    requests = [logged("a", ts=0.0), logged("b", ts=10.0), logged("c", ts=20.0)]
    near = np.array([1.0, 0.0], np.float32)
    far = np.array([0.0, 1.0], np.float32)

    def at(cos: float) -> Vector:
        return np.array([cos, np.sqrt(1 - cos**2)], np.float32)

    assert find_reasks(requests, [(0, 1)], {"a": near, "b": far}) == {}
    assert find_reasks(requests, [(0, 1)], {"a": near, "b": at(REASK_SIMILARITY + 1e-3)}) == {0: 1}
    assert find_reasks(requests, [(0, 1)], {"a": near, "b": at(REASK_SIMILARITY - 1e-3)}) == {}
    same = [logged("h", ts=0.0), logged("h", ts=5.0)]
    assert find_reasks(same, [(0, 1)], {}) == {0: 1}  # hashes: equal text only


def test_what_each_flag_asks_for() -> None:
    light, heavy = logged("q"), logged("q", lane="heavy", rule="default")
    assert want_of(light, "wrong", *LANES) == "complex"
    assert want_of(light, "re_ask", *LANES) == "complex"
    assert want_of(heavy, "too_slow", *LANES) == "simple"
    assert want_of(heavy, "wrong", *LANES) is None  # the heavy lane already answered it
    assert want_of(logged("q", cache="exact"), "wrong", *LANES) is None


def test_collect_flags_thumbs_down_and_the_first_of_a_reask() -> None:
    requests = [logged("x", ts=0.0, rid="asked"), logged("x", ts=30.0, rid="again"),
                logged("y", ts=500.0, rid="rated")]  # fmt: skip
    found = collect(requests, [Rating("rated", "too_shallow", "thin")], (0, 1000), "full",
                    LANES, {})  # fmt: skip
    flagged = {f.request.request_id: f for f in found.flagged}
    assert set(flagged) == {"asked", "rated"}
    assert flagged["asked"].reason == "re_ask" and flagged["rated"].comment == "thin"
    assert found.thumbs_down == 1 and found.re_asks == 1
    assert [r.request_id for r in found.unflagged()] == ["again"]


def test_prompts_none_is_refused_naming_the_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ReviewError, match=r"server\.request_log\.prompts"):
        check_mode("none")
    log = tmp_path / "requests.sqlite3"
    write_log(log, [logged("q")])
    config = write_yaml(tmp_path / "gw.yaml", config_data(log, prompts="none"))
    assert main(["misroutes", "--config", str(config), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert str(config) in err and "server.request_log.prompts: none" in err


def test_since_selects_the_window_through_the_reader(tmp_path: Path) -> None:
    now = 1_764_460_800.0  # 2025-11-30T00:00:00Z
    log = tmp_path / "requests.sqlite3"
    rows = [logged("old", ts=now - 8 * 86400), logged("week", ts=now - 6 * 86400),
            logged("day", ts=now - 3600)]  # fmt: skip
    write_log(log, rows, [(rows[0].request_id, Reason.WRONG), (rows[2].request_id, None)])
    reader = LogReader(sqlite3.connect(log))
    utc = ZoneInfo("UTC")
    week = reader.requests(parse_instant("7d", now, utc), now)
    assert [r.prompt for r in week] == ["week", "day"]
    assert [r.prompt for r in reader.requests(parse_instant("24h", now, utc), now)] == ["day"]
    since = parse_instant("2025-11-23", now, utc)
    assert [r.prompt for r in reader.requests(since, now)] == ["week", "day"]
    downs = reader.thumbs_down(parse_instant("7d", now, utc), now)
    assert [(d.request_id, d.reason) for d in downs] == [(rows[2].request_id, None)]


def test_the_reader_reads_the_shared_postgres_records(tmp_path: Path, postgres_url: str) -> None:
    """``stores.records: postgres``: ``misroutes`` reads the same rows from PostgreSQL."""
    health = StoreHealth(ManualClock(), retry_s=1.0)
    pool = PostgresPool(postgres_url, size=2, timeout_ms=2000, health=health)
    log = PostgresRequestLog(tmp_path / "journal", pool, flush_interval_s=60, prompts="full",
                             other_writers_s=0.0)  # fmt: skip
    rows = [logged("first", ts=1000.0), logged("second", ts=1100.0, lane="heavy", category="law")]
    fill_log(log, rows, [(rows[1].request_id, Reason.TOO_SLOW)])
    data = config_data(tmp_path / "journal")
    data["stores"] = {"records": "postgres", "postgres_url": postgres_url}
    reader, close = open_reader(parse_config(data), tmp_path / "gw.yaml")
    try:
        assert [(r.prompt, r.lane, r.category) for r in reader.requests(0, 2000)] == [
            ("first", "light", None), ("second", "heavy", "law"),
        ]  # fmt: skip
        downs = reader.thumbs_down(0, 2000)
        assert [(d.request_id, d.reason) for d in downs] == [(rows[1].request_id, "too_slow")]
    finally:
        close()


def test_a_log_without_feedback_has_no_thumbs_down(tmp_path: Path) -> None:
    log = tmp_path / "requests.sqlite3"
    conn = sqlite3.connect(log)
    conn.execute("CREATE TABLE requests (request_id TEXT, ts REAL)")
    assert LogReader(conn).thumbs_down(0, 1) == []


def test_a_log_from_before_the_category_column_reads_none(tmp_path: Path) -> None:
    """The review only reads: a file no gateway of this version has opened lacks the column."""
    conn = sqlite3.connect(tmp_path / "requests.sqlite3")
    columns = ("request_id, ts, tenant, model, lane, channel, rule, score, cache, status, "
               "latency_ms, prompt_tokens, completion_tokens, cost_usd, prompt")  # fmt: skip
    conn.execute(f"CREATE TABLE requests ({columns})")
    conn.execute("INSERT INTO requests (request_id, ts, tenant, status, prompt) "
                 "VALUES ('r1', 10.0, 't1', 200, 'q')")  # fmt: skip
    conn.commit()
    assert [(r.prompt, r.category) for r in LogReader(conn).requests(0, 20)] == [("q", None)]


def test_a_bad_since_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "requests.sqlite3"
    write_log(log, [logged("q")])
    config = write_yaml(tmp_path / "gw.yaml", config_data(log))
    assert main(["misroutes", "--config", str(config), "--since", "last week"]) == 2
    assert "expected a duration" in capsys.readouterr().err
