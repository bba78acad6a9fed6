"""The semantic cache on PostgreSQL + pgvector: what only a shared table has to prove.

Two ``PgSemanticCache`` objects on one database stand for two replicas: an entry written
through one is a hit through the other, and admin changes made through either reach both.
Namespaces and buckets are enforced by the query (a nearer vector of another tenant, embedder
version or bucket is never returned).  Outage: a dead socket, a server stopped and started
mid-run, and a server that accepts but never answers; the stage turns each into a miss.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hybrid_gateway.cache.semantic.cache import CacheBounds, Namespace
from hybrid_gateway.cache.semantic.decision import DecisionRule
from hybrid_gateway.cache.semantic.hygiene import NoiseStripper
from hybrid_gateway.cache.semantic.stage import SemanticStage
from hybrid_gateway.cache.semantic.store_pg import PgSemanticCache
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.stores.base import StoreUnavailable
from hybrid_gateway.stores.health import StoreHealth
from hybrid_gateway.types import ChatRequest, RequestRecord, Usage
from tests.cache.semantic_backends import pg_cache
from tests.embedding.fakes import AsyncHashingEmbedder, hashed_vector
from tests.stores.postgres_server import PostgresServer, dead_postgres_url, fresh_database
from tests.stores.test_outage import Events

USAGE = Usage(10, 5)
NS = Namespace("tenant:a", "hashing@1")
RULE = DecisionRule(threshold=0.9)
QUESTION = "how do I reset my password"


def health(clock: ManualClock, events: Events) -> StoreHealth:
    return StoreHealth(clock, retry_s=1.0, listeners=[events])


async def put(cache: PgSemanticCache, question: str, body: bytes = b"answer",
              ns: Namespace = NS, bucket: str = "b") -> int:  # fmt: skip
    entry_id = await cache.put(ns, bucket, question, hashed_vector(question), body, USAGE)
    assert entry_id is not None
    return entry_id


async def nearest(cache: PgSemanticCache, question: str, ns: Namespace = NS,
                  bucket: str = "b") -> bytes | None:  # fmt: skip
    found = await cache.lookup(ns, bucket, question, hashed_vector(question))
    return found.entry.body if found.hit and found.entry is not None else None


async def test_an_entry_written_through_one_replica_is_a_hit_through_the_other(
    postgres_url: str,
) -> None:
    clock = ManualClock()
    a, b = pg_cache(postgres_url, RULE, clock), pg_cache(postgres_url, RULE, clock)
    entry_id = await put(a, QUESTION, b"wrong answer")
    found = await b.lookup(NS, "b", QUESTION + "?", hashed_vector(QUESTION + "?"))
    assert found.hit and found.entry is not None and found.entry.id == entry_id
    assert found.entry.body == b"wrong answer" and found.entry.usage == USAGE
    assert await b.correct(entry_id, b"right answer")  # the operator, through B
    assert await nearest(a, QUESTION) == b"right answer"
    assert await a.invalidate(entry_id)  # through A
    assert await nearest(b, QUESTION) is None and await b.get(entry_id) is None
    await put(b, "what are your opening hours")
    assert await a.invalidate_scope("tenant:a") == 1
    assert (await b.stats())["entries"] == 0
    await a.aclose()
    await b.aclose()


async def test_other_namespaces_and_buckets_are_excluded_by_the_query(postgres_url: str) -> None:
    """Rows identical to the question exist in every other partition; none is ever returned,
    and the tenant's own, less similar entry is what the query finds."""
    cache = pg_cache(postgres_url, DecisionRule(threshold=-1.0), ManualClock())
    for ns, bucket in [
        (Namespace("tenant:b", NS.embedder), "b"),
        (Namespace(NS.scope, "hashing@2"), "b"),
        (Namespace("scope:shared", NS.embedder), "b"),
        (NS, "other-context"),
    ]:
        await put(cache, QUESTION, f"{ns.scope}/{ns.embedder}/{bucket}".encode(), ns, bucket)
    own = await put(cache, "what are your opening hours", b"own")  # fmt: skip
    found = await cache.find(NS, "b", hashed_vector(QUESTION), k=10)
    assert [(e.id, e.body) for e, _ in found] == [(own, b"own")]
    assert await nearest(cache, QUESTION) == b"own"  # threshold -1: the nearest is a "hit"
    assert await nearest(cache, QUESTION, ns=Namespace(NS.scope, "hashing@3")) is None
    await cache.aclose()


async def test_the_row_bound_is_shared_and_least_recently_used_rows_go(postgres_url: str) -> None:
    clock = ManualClock()
    bounds = CacheBounds(ttl_s=3600, max_entries=3, max_bytes=10_000_000)
    a = pg_cache(postgres_url, RULE, clock, bounds=bounds)
    b = pg_cache(postgres_url, RULE, clock, bounds=bounds)
    first = await put(a, "question number 0")
    for i in range(1, 3):
        await clock.advance(1)
        await put(b, f"question number {i}")
    await clock.advance(1)
    assert await nearest(a, "question number 0") is not None  # 0 is now the most recent use
    await clock.advance(1)
    await put(a, "question number 3")
    assert await b.maintain() == 3
    assert await a.get(first) is not None
    assert await nearest(b, "question number 1") is None  # least recently used went first
    await a.aclose()
    await b.aclose()


async def test_a_dead_server_is_a_miss_then_fails_fast_until_it_answers(tmp_path: Path) -> None:
    clock, events = ManualClock(), Events()
    cache = pg_cache(dead_postgres_url(tmp_path / "nothing"), RULE, clock,
                     health=health(clock, events))  # fmt: skip
    with pytest.raises(StoreUnavailable):
        await cache.lookup(NS, "b", QUESTION, hashed_vector(QUESTION))
    assert events.states == [False] and events.errors == ["semantic_lookup"]
    for _ in range(3):  # no connection attempt while down: no further error counted
        with pytest.raises(StoreUnavailable):
            await cache.put(NS, "b", QUESTION, hashed_vector(QUESTION), b"x", USAGE)
    assert events.errors == ["semantic_lookup"]
    await wait_for(lambda: clock.sleepers == 1)  # the background probe waits for retry_s
    await clock.advance(1.0)
    await wait_for(lambda: len(events.errors) == 2)
    assert events.errors[-1] == "semantic_ping" and not cache.health.up
    stats = await cache.stats()
    assert stats["backend"] == "postgres" and stats["up"] is False and stats["entries"] is None
    await cache.aclose()


async def test_the_stage_bypasses_the_cache_while_the_store_is_down(tmp_path: Path) -> None:
    clock = ManualClock()
    cache = pg_cache(dead_postgres_url(tmp_path / "nothing"), RULE, clock)
    stage = SemanticStage(cache, AsyncHashingEmbedder(), stripper=NoiseStripper(),
                          shared_scopes={})  # fmt: skip
    messages = [{"role": "user", "content": QUESTION}]
    for _ in range(2):
        record = RequestRecord(request_id="r", started_at=0.0)
        request = ChatRequest(
            "auto", messages, False, False, {"model": "auto", "messages": messages}
        )
        assert stage.prepare(request, record) is not None
        assert await stage.lookup(record) is None
        assert record.extra["cache_checks"] == "store_down"
        await stage.store(record, b"{}", USAGE)  # nothing stored, nothing raised
        assert "cache_entry" not in record.extra
    await stage.aclose()


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[PostgresServer]:
    server = PostgresServer(tmp_path / "pg")
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_mid_run_stop_and_recovery(own_server: PostgresServer) -> None:
    url = fresh_database(own_server)
    clock, events = ManualClock(), Events()
    cache = pg_cache(url, RULE, clock, health=health(clock, events))
    await put(cache, QUESTION, b"kept")
    own_server.stop()
    with pytest.raises(StoreUnavailable):
        await cache.lookup(NS, "b", QUESTION, hashed_vector(QUESTION))
    assert events.states == [False]
    own_server.start()
    await wait_for(lambda: clock.sleepers == 1)
    await clock.advance(1.0)
    await wait_for(lambda: cache.health.up)
    assert events.states == [False, True]
    assert await nearest(cache, QUESTION) == b"kept"  # the rows outlived the outage
    await cache.aclose()


async def test_a_server_that_never_answers_costs_one_timeout(tmp_path: Path) -> None:
    folder = tmp_path / "mute"
    folder.mkdir()
    with socket.socket(socket.AF_UNIX) as mute:  # accepts connections, never says a word
        mute.bind(str(folder / ".s.PGSQL.5432"))
        mute.listen(8)
        clock, events = ManualClock(), Events()
        cache = pg_cache(dead_postgres_url(folder), RULE, clock, timeout_s=0.3,
                         health=health(clock, events))  # fmt: skip
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await cache.lookup(NS, "b", QUESTION, hashed_vector(QUESTION))
        assert 0.25 <= time.monotonic() - started < 1.5
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await cache.lookup(NS, "b", QUESTION, hashed_vector(QUESTION))
        assert time.monotonic() - started < 0.05  # down: failed at once
        assert events.errors == ["semantic_lookup"]
        await cache.aclose()


async def wait_for(condition: object, timeout_s: float = 10.0) -> None:
    """Wait (bounded) for a background probe running on a real worker thread."""
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)
