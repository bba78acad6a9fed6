"""The router_models table on both records stores (SQLite, PostgreSQL through the gateway's
pool): versions number up, the live one is the one made live last, the bytes read back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hybrid_gateway.learning.model_store import ModelStore, PostgresModelStore, SqliteModelStore
from hybrid_gateway.learning.versions_cli import rollback
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.stores.health import StoreHealth
from hybrid_gateway.stores.postgres import PostgresPool

NOW = 1_780_000_000.0


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ModelStore]:
    if request.param == "sqlite":
        opened: ModelStore = SqliteModelStore(tmp_path / "requests.sqlite3")
        yield opened
        opened.close()
        return
    url = request.getfixturevalue("postgres_url")
    pool = PostgresPool(url, size=2, timeout_ms=2000,
                        health=StoreHealth(ManualClock(), retry_s=1.0))  # fmt: skip
    yield PostgresModelStore(lambda work: pool.run("router_models", work))
    pool.close()


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
