from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from hybrid_gateway.cache.semantic.store_writer import Op, StoreWriter

_INSERT = "INSERT OR REPLACE INTO t VALUES (?, ?)"


def table(path: Path) -> Path:
    db = sqlite3.connect(str(path))
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    db.commit()
    db.close()
    return path


def rows(path: Path) -> list[tuple[int, str]]:
    db = sqlite3.connect(str(path))
    try:
        return db.execute("SELECT id, v FROM t ORDER BY id").fetchall()
    finally:
        db.close()


def test_writes_land_in_order_after_flush(tmp_path: Path) -> None:
    path = table(tmp_path / "s.sqlite3")
    writer = StoreWriter(path)
    writer.submit(Op(_INSERT, (1, "a"), droppable=True))
    writer.submit(Op(_INSERT, (2, "b"), droppable=True))
    writer.submit(Op("DELETE FROM t WHERE id = ?", (1,)))
    writer.submit(Op(_INSERT, (1, "again"), droppable=True))  # after the delete: kept
    writer.submit(Op("UPDATE t SET v = ? WHERE id = ?", ("B", 2)))
    assert writer.flush(5)
    assert rows(path) == [(1, "again"), (2, "B")] and writer.pending == 0
    writer.close()
    writer.close()  # once only
    with pytest.raises(RuntimeError):
        writer.submit(Op(_INSERT, (3, "c")))


def test_close_writes_what_waits(tmp_path: Path) -> None:
    path = table(tmp_path / "s.sqlite3")
    writer = StoreWriter(path)
    for n in range(200):
        writer.submit(Op(_INSERT, (n, str(n)), droppable=True))
    writer.close()
    assert len(rows(path)) == 200


def test_full_queue_drops_puts_never_deletions(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = table(tmp_path / "s.sqlite3")
    blocker = sqlite3.connect(str(path), isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another worker holds the write lock: nothing applies
    writer = StoreWriter(path, max_pending=2, attempts=50, retry_wait_s=0.01)
    writer.submit(Op(_INSERT, (1, "a"), droppable=True))  # taken by the writer, retrying
    with writer._cond:
        assert writer._cond.wait_for(lambda: not writer._ops, 5)
    assert not writer.flush(0.05)
    with caplog.at_level(logging.WARNING):
        for n in range(2, 6):
            writer.submit(Op(_INSERT, (n, "x"), droppable=True))
        writer.submit(Op("DELETE FROM t WHERE id = ?", (2,)))  # past the bound: still kept
    assert writer.dropped == 2
    assert sum("row dropped" in r.getMessage() for r in caplog.records) == 1  # once a minute
    blocker.execute("ROLLBACK")
    blocker.close()
    assert writer.flush(5)
    assert rows(path) == [(1, "a"), (3, "x")] and writer.failed == 0
    writer.close()


def test_a_batch_that_keeps_failing_is_given_up_with_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = table(tmp_path / "s.sqlite3")
    writer = StoreWriter(path, attempts=2, retry_wait_s=0)
    with caplog.at_level(logging.WARNING):
        writer.submit(Op("INSERT INTO missing VALUES (?)", (1,)))
        assert writer.flush(5)
    assert writer.failed == 1
    assert any(r.levelno == logging.ERROR and "given up" in r.getMessage()
               for r in caplog.records)  # fmt: skip
    writer.submit(Op(_INSERT, (7, "fine")))  # the writer goes on
    writer.close()
    assert rows(path) == [(7, "fine")]
