"""The router_models table on both records stores (SQLite, PostgreSQL through the gateway's
pool): versions number up, the live one is the one made live last, the bytes (the model's and
its cascade student's) read back, and a table from before students were stored gains the
column, its rows loading as versions without a student."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hybrid_gateway.learning.model_store import ModelStore
from hybrid_gateway.learning.versions_cli import rollback
from tests.learning.model_stores import open_model_store

NOW = 1_780_000_000.0


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ModelStore]:
    yield from open_model_store(backend, request, tmp_path)


@pytest.fixture
def old_store(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ModelStore]:
    yield from open_model_store(backend, request, tmp_path, old_table=True)


def test_versions_live_and_rollback(store: ModelStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert store.live() is None and store.versions() == []
    assert store.add(NOW, "e5@1", {"source": "file"}, b"\x00one") == 1
    assert store.add(NOW + 5, "e5@1", {"quality": 0.9, "cost": 0.4}, b"two\xff") == 2
    assert store.live() == (2, "e5@1")
    assert store.model(1) == b"\x00one" and store.model(2) == b"two\xff"
    assert store.model(7) is None
    versions = store.versions()
    assert [(v.version, v.created, v.live_since) for v in versions] == [
        (1, NOW, NOW), (2, NOW + 5, NOW + 5),
    ]  # fmt: skip
    assert versions[1].metrics == {"quality": 0.9, "cost": 0.4}
    assert store.make_live(1, NOW + 10) and store.live() == (1, "e5@1")
    assert not store.make_live(9, NOW + 11) and store.live() == (1, "e5@1")
    assert rollback(store, 2) == 0 and store.live() == (2, "e5@1")
    assert rollback(store, None) == 0 and store.live() == (1, "e5@1")  # the one below
    assert "v1 is live (was v2)" in capsys.readouterr().out
    assert [v.has_student for v in versions] == [False, False] and store.student(1) is None


def test_a_student_is_stored_with_its_version(store: ModelStore) -> None:
    assert store.add(NOW, "e5@1", {"source": "file"}, b"model one", b"\x00student one") == 1
    assert store.add(NOW + 5, "e5@1", {}, b"model two") == 2
    assert store.add(NOW + 9, "e5@1", {}, b"model three", b"student three\xff") == 3
    assert store.student(1) == b"\x00student one" and store.student(3) == b"student three\xff"
    assert store.student(2) is None and store.student(7) is None
    assert store.model(1) == b"model one"
    assert [v.has_student for v in store.versions()] == [True, False, True]


def test_a_table_from_before_students_gains_the_column(old_store: ModelStore) -> None:
    versions = old_store.versions()
    assert [(v.version, v.has_student) for v in versions] == [(1, False)]
    assert old_store.model(1) == b"old" and old_store.student(1) is None
    assert old_store.live() == (1, "e5@1")
    assert old_store.add(NOW, "e5@1", {}, b"new", b"its student") == 2
    assert old_store.student(2) == b"its student"
