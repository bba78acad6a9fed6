"""The semantic cache object: hits, partitions, namespaces, bounds, TTL, restart, admin.

Tests about what is stored and found run against both backends (``backend`` fixture): the
in-process ``SemanticCache`` and ``PgSemanticCache`` on a real PostgreSQL + pgvector.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid_gateway.cache.semantic.backend import SemanticBackend
from hybrid_gateway.cache.semantic.cache import CacheBounds, Namespace, SemanticCache, entry_bytes
from hybrid_gateway.cache.semantic.decision import DecisionRule
from hybrid_gateway.cache.semantic.store import SqliteEntryStore
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.types import Usage
from tests.cache.semantic_backends import Factory, backend_factory
from tests.embedding.fakes import hashed_vector

USAGE = Usage(10, 5)
NS = Namespace("tenant:a", "hashing@1")
RULE = DecisionRule(threshold=0.9)


def make(
    clock: ManualClock | None = None,
    *,
    store: SqliteEntryStore | None = None,
    max_entries: int = 1000,
    max_bytes: int = 10_000_000,
    ttl_s: float = 3600,
) -> SemanticCache:
    return SemanticCache(
        bounds=CacheBounds(ttl_s=ttl_s, max_entries=max_entries, max_bytes=max_bytes),
        rule=RULE, clock=clock or ManualClock(), store=store, epoch=1_000_000.0,
    )  # fmt: skip


@pytest.fixture(params=["memory", "postgres"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Factory]:
    """``backend(clock, max_entries=, ttl_s=)``: an empty cache of the parametrised kind."""
    async with backend_factory(request, RULE) as factory:
        yield factory


async def put(cache: SemanticBackend, question: str, body: bytes = b"answer", **kw: object) -> int:
    ns = kw.get("ns", NS)
    bucket = kw.get("bucket", "b")
    assert isinstance(ns, Namespace) and isinstance(bucket, str)
    entry_id = await cache.put(ns, bucket, question, hashed_vector(question), body, USAGE)
    assert entry_id is not None
    return entry_id


async def ask(cache: SemanticBackend, question: str, ns: Namespace = NS, bucket: str = "b") -> bool:
    found = await cache.lookup(ns, bucket, question, hashed_vector(question))
    return found.hit


async def entries(cache: SemanticBackend) -> object:
    return (await cache.stats())["entries"]


async def test_paraphrase_hits_and_unrelated_misses(backend: Factory) -> None:
    cache = await backend()
    await put(cache, "how do I reset my password")
    found = await cache.lookup(NS, "b", "how do I reset my password?",
                               hashed_vector("how do I reset my password?"))  # fmt: skip
    assert found.hit and found.entry is not None and found.entry.body == b"answer"
    assert found.verdict is not None and found.verdict.similarity > 0.9
    assert "threshold" in found.verdict.passed and "numbers" in found.verdict.passed
    assert not await ask(cache, "what is the capital of France")


async def test_guards_refuse_a_near_duplicate_with_another_number(backend: Factory) -> None:
    cache = await backend()
    await put(cache, "转账限额是5000元吗")
    found = await cache.lookup(NS, "b", "转账限额是50000元吗", hashed_vector("转账限额是50000元吗"))
    assert found.verdict is not None and not found.hit
    assert found.verdict.similarity >= RULE.threshold and found.verdict.failed == ("numbers",)


async def test_other_bucket_and_other_embedder_version_never_hit(backend: Factory) -> None:
    cache = await backend()
    await put(cache, "how do I reset my password")
    assert await ask(cache, "how do I reset my password")
    assert not await ask(cache, "how do I reset my password", bucket="other-context")
    new_model = Namespace(NS.scope, "hashing@2")
    assert not await ask(cache, "how do I reset my password", ns=new_model)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)  # each example: backend()
@given(
    writes=st.lists(
        st.tuples(st.sampled_from(["t1", "t2", "t3", "t4"]), st.sampled_from(["q1", "q2", "q3"])),
        min_size=1, max_size=12,
    ),
    reader=st.sampled_from(["t1", "t2", "t3", "t4"]),
    question=st.sampled_from(["q1", "q2", "q3"]),
)  # fmt: skip
async def test_no_cross_tenant_hit(
    backend: Factory, writes: list[tuple[str, str]], reader: str, question: str
) -> None:
    """Whatever was written by whom, a tenant is only ever served its own answers."""
    cache = await backend()
    texts = {"q1": "how do I open an account", "q2": "how do I close an account",
             "q3": "what are your opening hours"}  # fmt: skip
    for tenant, q in writes:
        await put(
            cache,
            texts[q],
            body=f"{tenant}".encode(),
            ns=Namespace(f"tenant:{tenant}", NS.embedder),
        )
    ns = Namespace(f"tenant:{reader}", NS.embedder)
    found = await cache.lookup(ns, "b", texts[question], hashed_vector(texts[question]))
    if found.hit:
        assert found.entry is not None and found.entry.body == reader.encode()
    assert found.hit == ((reader, question) in writes)


async def test_ttl_expires_entries(backend: Factory) -> None:
    clock = ManualClock()
    cache = await backend(clock, ttl_s=60)
    await put(cache, "how do I reset my password")
    await clock.advance(59)
    assert await ask(cache, "how do I reset my password")
    await clock.advance(2)
    assert not await ask(cache, "how do I reset my password")
    stats = await cache.stats()
    assert stats["entries"] == 0 and stats["bytes"] == 0


async def test_eviction_keeps_memory_under_the_bound_lru_first() -> None:
    body = b"x" * 1000
    one = len(body) + 64 * 4 + 200 + len("question 00")  # answer + vector + overhead + text
    cache = make(max_bytes=5 * one + 10)
    ids = [await put(cache, f"question {i:02d}", body) for i in range(3)]
    assert await ask(cache, "question 00")  # 0 is now the most recently used
    for i in range(3, 20):
        await put(cache, f"question {i:02d}", body)
        assert cache.size_bytes <= 5 * one + 10
    assert cache.entries == 5
    assert await cache.get(ids[1]) is None  # least recently used went first
    assert await ask(cache, "question 19")
    await cache.aclose()


async def test_an_expired_nearest_entry_does_not_hide_a_live_one() -> None:
    clock = ManualClock()
    cache = make(clock, ttl_s=60)
    await put(cache, "how do I reset my password", b"old")
    await clock.advance(50)
    await put(cache, "how do I reset my password now", b"new")
    await clock.advance(11)  # the exact match expired, the paraphrase has 49 s left
    found = await cache.lookup(NS, "b", "how do I reset my password",
                               hashed_vector("how do I reset my password"))  # fmt: skip
    assert found.hit and found.entry is not None and found.entry.body == b"new"
    assert cache.entries == 1
    await cache.aclose()


async def test_a_longer_correction_evicts_others_not_itself() -> None:
    body = b"x" * 1000
    one = len(body) + 64 * 4 + 200 + len("question 00")
    cache = make(max_bytes=3 * one + 10)
    ids = [await put(cache, f"question {i:02d}", body) for i in range(3)]
    assert await cache.correct(ids[0], b"y" * 1500)  # the oldest entry, now 500 bytes longer
    assert cache.size_bytes <= 3 * one + 10
    assert await cache.get(ids[1]) is None  # the least recently used other entry went
    fixed = await cache.get(ids[0])
    assert fixed is not None and fixed.body == b"y" * 1500
    assert await cache.get(ids[2]) is not None
    await cache.aclose()


async def test_entry_bound(backend: Factory) -> None:
    cache = await backend(max_entries=3)
    for i in range(10):
        await put(cache, f"question number {i}")
    assert await entries(cache) == 3
    assert await ask(cache, "question number 9") and not await ask(cache, "question number 0")


async def test_survives_restart_and_bounds_apply_on_load(tmp_path: Path) -> None:
    path = tmp_path / "semantic.sqlite3"
    clock = ManualClock()
    first = make(clock, store=SqliteEntryStore(path))
    kept = await put(first, "how do I reset my password", b"reset it here")
    await put(first, "what are your opening hours", b"nine to five")
    await first.aclose()

    second = make(clock, store=SqliteEntryStore(path))
    assert await second.load("hashing@1") == 2
    found = await second.lookup(NS, "b", "how do I reset my password",
                                hashed_vector("how do I reset my password"))  # fmt: skip
    assert found.hit and found.entry is not None and found.entry.id == kept
    assert found.entry.body == b"reset it here" and found.entry.usage == USAGE
    new_id = await put(second, "where is the nearest branch")
    assert new_id > kept  # ids continue after a restart
    await second.aclose()

    other_version = make(clock, store=SqliteEntryStore(path))
    assert await other_version.load("hashing@2") == 0  # another model's vectors never load
    await other_version.aclose()


async def test_expired_entries_are_dropped_at_load(tmp_path: Path) -> None:
    path = tmp_path / "semantic.sqlite3"
    clock = ManualClock()
    first = make(clock, store=SqliteEntryStore(path), ttl_s=60)
    await put(first, "how do I reset my password")
    await first.aclose()
    await clock.advance(120)
    second = make(clock, store=SqliteEntryStore(path), ttl_s=60)
    assert await second.load("hashing@1") == 0
    await second.aclose()


async def test_admin_invalidate_correct_and_drop_scope(backend: Factory) -> None:
    cache = await backend()
    wrong = await put(cache, "how do I reset my password", b"wrong answer")
    other = await put(cache, "what are your opening hours")
    assert await cache.correct(wrong, b"right answer")
    found = await cache.lookup(NS, "b", "how do I reset my password",
                               hashed_vector("how do I reset my password"))  # fmt: skip
    assert found.entry is not None and found.entry.body == b"right answer"
    fixed = await cache.get(wrong)
    assert fixed is not None and fixed.question == "how do I reset my password"
    assert await cache.invalidate(other)
    assert not await cache.invalidate(other)
    assert await cache.get(other) is None
    assert not await ask(cache, "what are your opening hours")
    await put(cache, "something else entirely", ns=Namespace("tenant:b", NS.embedder))
    await put(cache, "a newer model wrote this", ns=Namespace(NS.scope, "hashing@2"))
    assert await cache.invalidate_scope("tenant:a") == 2  # every embedder version of the scope
    assert await entries(cache) == 1


async def test_two_workers_on_one_file_never_share_an_entry_id(tmp_path: Path) -> None:
    """``serve --workers 2`` with ``records: sqlite``: both caches write one file.  Each used to
    count ids from the file's largest at its start, so both gave id 1 to their first entry and
    one row replaced the other (and an admin correction through one worker could change the
    other's answer on disk)."""
    path = tmp_path / "semantic.sqlite3"
    a, b = make(store=SqliteEntryStore(path)), make(store=SqliteEntryStore(path))
    assert await a.load("hashing@1") == 0 and await b.load("hashing@1") == 0
    ids_a = [await put(a, f"question {n} from worker a") for n in range(3)]
    ids_b = [await put(b, f"question {n} from worker b") for n in range(3)]
    assert not set(ids_a) & set(ids_b)
    assert await b.correct(ids_b[0], b"corrected through b")
    await a.aclose()
    await b.aclose()
    restarted = make(store=SqliteEntryStore(path))
    assert await restarted.load("hashing@1") == 6  # every row kept
    for entry_id in ids_a:
        entry = await restarted.get(entry_id)
        assert entry is not None and entry.body == b"answer" and "worker a" in entry.question
    fixed = await restarted.get(ids_b[0])
    assert fixed is not None and fixed.body == b"corrected through b"
    assert await put(restarted, "a new question") > max(ids_a + ids_b)
    await restarted.aclose()


def test_id_blocks_follow_rows_written_before_the_counter(tmp_path: Path) -> None:
    store = SqliteEntryStore(tmp_path / "semantic.sqlite3")
    assert store.reserve_ids(10) == 1 and store.reserve_ids(10) == 11
    store._db.execute("DROP TABLE semantic_ids")  # a file from before the counter
    store._db.execute("CREATE TABLE semantic_ids (next INTEGER NOT NULL)")
    store._db.execute(
        "INSERT INTO semantic_entries VALUES (500, 's', 'e', 'b', 'q', x'00', x'00', 1, 1, 0, 0, 0)"
    )
    store._db.commit()
    assert store.reserve_ids(10) == 501
    store.close()


async def test_admin_changes_are_written_through(tmp_path: Path) -> None:
    path = tmp_path / "semantic.sqlite3"
    cache = make(store=SqliteEntryStore(path))
    wrong = await put(cache, "how do I reset my password", b"wrong answer")
    other = await put(cache, "what are your opening hours")
    assert await cache.correct(wrong, b"right answer")
    assert await cache.invalidate(other)
    await put(cache, "something else entirely", ns=Namespace("tenant:b", NS.embedder))
    assert await cache.invalidate_scope("tenant:b") == 1
    await cache.aclose()

    reloaded = make(store=SqliteEntryStore(path))
    assert await reloaded.load("hashing@1") == 1
    entry = await reloaded.get(wrong)
    assert entry is not None and entry.body == b"right answer"
    await reloaded.aclose()


async def test_find_lists_nearest_entries_for_an_operator(backend: Factory) -> None:
    cache = await backend()
    await put(cache, "how do I reset my password")
    await put(cache, "how do I change my password")
    found = await cache.find(NS, "b", hashed_vector("reset password"), k=5)
    assert [e.question for e, _ in found][:1] == ["how do I reset my password"]
    assert len(found) == 2


def test_entry_bytes_counts_answer_question_and_vector() -> None:
    from hybrid_gateway.cache.semantic.store import StoredEntry

    entry = StoredEntry(1, "s", "e", "b", "abc", np.zeros(64, np.float32), b"12345", USAGE, 0, 0)
    assert entry_bytes(entry) == 5 + 3 + 256 + 200
