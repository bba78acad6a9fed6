"""Two gateway replicas sharing their records in PostgreSQL (``stores.records: postgres``).

Two ``serve`` processes (A and B) on one config: ``stores.backend: redis`` (a private
``redis-server``) and ``records: postgres`` (a database of the session's pgserver); the
official SDK as the client.  Requests answered through A and through B all land in the one
``requests`` table; feedback posted through B for a request A answered, right after A answered
it, is saved and read back through A; both replicas report the records store in ``/healthz``
and ``/metrics``.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest

from tests.e2e.stack import Gateway, emulator, gateway, write_config
from tests.e2e.test_replicas import ask, http_get, replica_config, sdk
from tests.feedback.test_e2e import call
from tests.stores.postgres_server import PostgresServer, fresh_database
from tests.stores.redis_server import RedisServer, unique_prefix


@dataclass
class Pair:
    a: Gateway
    b: Gateway
    postgres_url: str


@pytest.fixture(scope="module")
def pair(
    postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pair]:
    folder = tmp_path_factory.mktemp("replicas-pg")
    redis_server = RedisServer(folder)
    redis_server.start()
    url = fresh_database(postgres_server)
    try:
        with emulator(folder, "records-emu", "--model", "fast-model", "--zero-delay") as emu:
            config = replica_config(emu.url, redis_server.url, unique_prefix(), folder / "log")
            config["stores"] |= {"records": "postgres", "postgres_url": url}
            path = write_config(folder / "gateway.yaml", config)
            with gateway(path, "records-a") as a, gateway(path, "records-b") as b:
                yield Pair(a, b, url)
    finally:
        redis_server.stop()


def table_ids(url: str, ids: list[str]) -> set[str]:
    with psycopg.connect(url) as db:
        try:
            rows = db.execute("SELECT request_id FROM requests WHERE request_id = ANY(%s)", (ids,))
        except psycopg.errors.UndefinedTable:  # no replica has flushed yet: created at first use
            return set()
        return {row[0] for row in rows}


def test_both_replicas_report_the_records_store(pair: Pair) -> None:
    for replica in (pair.a, pair.b):
        status, body = http_get(replica.url + "/healthz")
        assert status == 200 and body["status"] == "ok"
        assert body["records"]["backend"] == "postgres" and body["records"]["up"] is True
        with urllib.request.urlopen(replica.url + "/metrics", timeout=10) as response:
            assert 'hybrid_gateway_store_up{store="postgres"} 1' in response.read().decode()


def test_requests_through_a_and_b_land_in_one_table(pair: Pair) -> None:
    ids: list[str] = []
    with sdk(pair.a) as a, sdk(pair.b) as b:
        for i in range(10):
            ids.append(ask(a if i % 2 else b, "fast").headers["x-request-id"])
    deadline = time.monotonic() + 10  # each replica flushes every 50 ms
    while table_ids(pair.postgres_url, ids) != set(ids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert table_ids(pair.postgres_url, ids) == set(ids)


def test_feedback_through_b_for_a_request_a_answered(pair: Pair) -> None:
    with sdk(pair.a) as a:
        request_id = ask(a, "fast").headers["x-request-id"]
    # At once: A may not have flushed the row yet, and B cannot flush A's journal.
    body = {"request_id": request_id, "rating": "down", "reason": "wrong"}
    status, saved = call("POST", pair.b.url + "/v1/feedback", body)
    assert status == 200, saved
    assert saved["request"]["lane"] == "fast" and saved["rating"] == "down"
    status, read = http_get(f"{pair.a.url}/v1/feedback/{request_id}")
    assert status == 200 and (read["rating"], read["reason"]) == ("down", "wrong")
    with psycopg.connect(pair.postgres_url) as db:
        rated = db.execute(
            "SELECT rating, lane FROM rated_requests WHERE request_id = %s", (request_id,)
        ).fetchall()
    assert rated == [("down", "fast")]
    status, missing = call(
        "POST", pair.b.url + "/v1/feedback", {"request_id": "req_never", "rating": "up"}
    )
    assert status == 404 and missing["error"]["param"] == "request_id"
