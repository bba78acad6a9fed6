"""Fixtures shared across test packages: a real PostgreSQL 16 + pgvector (``pgserver``).

Property tests run without Hypothesis's per-example deadline (200 ms by default): they check
behaviour, and one example on a loaded 2-core machine can take longer (a config property test,
whose only timing-dependent part is that deadline, failed once beside a training job and
passed on every rerun)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.stores.postgres_server import (
    PostgresServer,
    drop_database,
    fresh_database,
    temporary_server,
)

settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One server for the whole session, started on first use, removed at the end."""
    with temporary_server() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of a database of its own for this test, with ``CREATE EXTENSION vector`` done."""
    url = fresh_database(postgres_server)
    try:
        yield url
    finally:
        drop_database(postgres_server, url)
