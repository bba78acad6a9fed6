"""PostgreSQL going away under the request log: at start (a dead socket) and mid-run (a server
of this test's own, stopped and started again).  Writes keep succeeding, the rows wait in the
local journal, the store is marked down (errors counted, ``status`` degraded), and every row is
in the table once PostgreSQL is back.  Time for the retry gate is a ``ManualClock``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hybrid_gateway.errors import Overloaded
from hybrid_gateway.feedback import FeedbackInput, Rating
from hybrid_gateway.observability.request_log_pg import PostgresRequestLog
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.stores.health import StoreHealth
from hybrid_gateway.stores.postgres import PostgresPool, pyformat
from hybrid_gateway.types import RequestRecord
from tests.stores.postgres_server import (
    PostgresServer,
    dead_postgres_url,
    fresh_database,
    temporary_server,
)
from tests.stores.test_outage import Events


def record(request_id: str) -> RequestRecord:
    return RequestRecord(request_id=request_id, started_at=1_780_000_000.0, tenant="acme")


@pytest.fixture(scope="module")
def own_server() -> Iterator[PostgresServer]:
    """Stopped and started by the tests here; each leaves it running."""
    with temporary_server() as server:
        yield server


def open_log(url: str, folder: Path, clock: ManualClock, events: Events) -> PostgresRequestLog:
    health = StoreHealth(clock, retry_s=1.0, listeners=[events])
    pool = PostgresPool(url, size=2, timeout_ms=2000, health=health)
    return PostgresRequestLog(folder / "requests", pool, flush_interval_s=3600, other_writers_s=0)


def ids(log: PostgresRequestLog) -> list[str]:
    return [row[0] for row in log.query("SELECT request_id FROM requests ORDER BY request_id")]


async def test_rows_wait_on_disk_while_postgres_is_down_and_all_go_in_after(
    own_server: PostgresServer, tmp_path: Path
) -> None:
    clock, events = ManualClock(), Events()
    log = open_log(fresh_database(own_server), tmp_path, clock, events)
    log.write(record("req_1"))
    assert log.flush() == 1

    own_server.stop()
    for name in ("req_2", "req_3"):
        log.write(record(name))  # acknowledged: journaled on local disk
    assert log.flush() == 0  # no exception: the batch waits
    assert events.states == [False] and events.errors == ["insert"]
    status = log.status()
    assert (status["backend"], status["up"], status["journal_files_buffered"]) == (
        "postgres", False, 1,
    )  # fmt: skip
    log.write(record("req_4"))
    assert log.flush() == 0
    assert events.errors == ["insert"]  # within retry_s: no new connection attempt
    feedback = log.open_feedback()
    with pytest.raises(Overloaded) as refused:
        await feedback.save("acme", FeedbackInput("req_1", Rating.UP), now=1.0)
    assert (refused.value.status, refused.value.code) == (503, "store_unavailable")

    own_server.start()
    assert log.flush() == 0  # still within retry_s of the last failure
    await clock.advance(1.0)
    assert log.flush() == 3  # the backlog, then what was journaled meanwhile
    assert events.states == [False, True] and log.status()["up"] is True
    assert log.status()["journal_files_buffered"] == 0
    assert ids(log) == ["req_1", "req_2", "req_3", "req_4"]
    log.write(record("req_5"))
    assert log.flush() == 1  # straight from memory again
    saved = await feedback.save("acme", FeedbackInput("req_1", Rating.UP), now=2.0)
    assert saved.rating is Rating.UP
    log.close()
    assert len(list(tmp_path.glob("requests.journal.*"))) == 0


def test_a_log_started_without_postgres_keeps_its_rows_for_the_next_start(
    postgres_url: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    dead = open_log(dead_postgres_url(tmp_path / "nowhere"), tmp_path, clock, Events())
    for name in ("req_1", "req_2"):
        dead.write(record(name))
    assert dead.flush() == 0
    assert dead.status()["up"] is False
    dead.close()  # PostgreSQL still unreachable: the journal stays on disk
    assert len(list(tmp_path.glob("requests.journal.*"))) >= 1

    live = open_log(postgres_url, tmp_path, clock, Events())
    assert ids(live) == ["req_1", "req_2"]  # replayed at start-up
    live.close()
    assert len(list(tmp_path.glob("requests.journal.*"))) == 0


def test_a_connection_broken_by_a_restart_is_replaced_without_an_outage(
    own_server: PostgresServer,
) -> None:
    events = Events()
    health = StoreHealth(ManualClock(), retry_s=1.0, listeners=[events])
    pool = PostgresPool(fresh_database(own_server), size=1, timeout_ms=2000, health=health)
    assert pool.run("query", lambda conn: conn.execute("SELECT 1").fetchone()) == (1,)
    own_server.stop()
    own_server.start()  # the pooled connection is dead now
    assert pool.run("query", lambda conn: conn.execute("SELECT 2").fetchone()) == (2,)
    assert (events.states, events.errors, health.up) == ([], [], True)
    pool.close()


def test_question_marks_become_psycopg_placeholders() -> None:
    assert pyformat("SELECT a FROM t WHERE b = ? AND c LIKE 'x?%' AND d >= ?") == (
        "SELECT a FROM t WHERE b = %s AND c LIKE 'x?%%' AND d >= %s"
    )
