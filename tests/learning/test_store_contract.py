"""The verdict store on both records stores (SQLite, PostgreSQL): rows read back as written,
a repeated save is harmless, and a pending feedback audit takes its verdict from the rating."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from hybrid_gateway.accounting.report import AuditCost, LogSource, audit_costs
from hybrid_gateway.feedback import FeedbackInput, Rating
from hybrid_gateway.learning.store import LABELS_SQL, AuditRow, SqliteVerdictStore, SqlVerdictStore
from hybrid_gateway.learning.store_pg import PostgresVerdictStore
from hybrid_gateway.observability.journaled_log import RequestLog
from hybrid_gateway.observability.request_log import SqliteRequestLog
from hybrid_gateway.observability.request_log_pg import PostgresRequestLog
from tests.stores.test_records_contract import NOW, MakeLog, backend, make_log

__all__ = ["backend", "make_log"]  # the contract's fixtures, used here


def verdicts(log: RequestLog) -> SqlVerdictStore:
    if isinstance(log, PostgresRequestLog):
        return PostgresVerdictStore(log.pool)
    assert isinstance(log, SqliteRequestLog)
    return SqliteVerdictStore(log.path)


ROWS = [
    AuditRow("req_r", NOW, "acme", "router", "llm", "rubric-1", "a_worse", None, "light",
             "heavy", None, None, 0.0125, None),
    AuditRow("req_c", NOW + 1, "acme", "cache", "marks", None, "equivalent", None, None,
             "light", 0.9375, "tenant:acme", 0.5, "What is 6 x 7?", "What's 6 times 7?"),
    AuditRow("req_f", NOW + 2, "beta", "router", "feedback", None, None, None, "light",
             "heavy", None, None, 0.0, None),
    AuditRow("req_x", NOW + 3, "beta", "router", "llm", "rubric-1", None, "judge_refused",
             "light", "heavy", None, None, 0.25, None),
]  # fmt: skip


async def test_rows_read_back_and_a_second_save_changes_nothing(make_log: MakeLog) -> None:
    log = make_log()
    store = verdicts(log)
    for row in ROWS:
        await store.save(row)
    await store.save(replace(ROWS[0], verdict="b_worse"))  # the first row stays
    for row in ROWS:
        assert await store.get(row.request_id) == row
    assert await store.get("req_none") is None
    await store.aclose()


async def test_a_pending_feedback_audit_reads_its_verdict_from_the_rating(
    make_log: MakeLog,
) -> None:
    log = make_log()
    store = verdicts(log)
    for row in ROWS:
        await store.save(row)
    feedback = log.open_feedback()
    await feedback.save("beta", FeedbackInput("req_f", Rating.DOWN), now=NOW)
    labels = {r[0]: r[8] for r in log.query(LABELS_SQL, (NOW - 1, NOW + 10))}
    assert labels == {"req_r": "a_worse", "req_c": "equivalent", "req_f": "a_worse",
                      "req_x": None}  # fmt: skip
    await feedback.save("beta", FeedbackInput("req_f", Rating.UP), now=NOW + 5)
    labels = {r[0]: r[8] for r in log.query(LABELS_SQL, (NOW - 1, NOW + 10))}
    assert labels["req_f"] == "equivalent"
    await feedback.aclose()
    await store.aclose()


async def test_the_cost_report_counts_audit_spend_apart(make_log: MakeLog) -> None:
    log = make_log()
    dialect: Literal["sqlite", "postgres"] = (
        "postgres" if isinstance(log, PostgresRequestLog) else "sqlite"
    )
    source = LogSource(log.query, dialect)
    assert audit_costs(source, NOW - 1, NOW + 10) == ()  # no audits table yet
    store = verdicts(log)
    for row in ROWS:
        await store.save(row)
    assert audit_costs(source, NOW - 1, NOW + 10) == (
        AuditCost("cache", 1, 0.5), AuditCost("router", 3, 0.0125 + 0.25),
    )  # fmt: skip
    assert audit_costs(source, NOW + 1.5, NOW + 10) == (AuditCost("router", 2, 0.25),)
    await store.aclose()
