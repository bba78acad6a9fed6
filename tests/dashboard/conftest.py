from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from hybrid_gateway.api.app import create_app
from hybrid_gateway.config import parse_config


def full_config(log_path: Path) -> dict[str, Any]:
    """Every feature that registers metrics switched on; nothing listens at the channels."""
    return {
        "channels": {
            "light-c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"},
            "heavy-c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"},
        },
        "lanes": {"light": {"channel": "light-c"}, "heavy": {"channel": "heavy-c"}},
        "server": {"request_log": {"path": str(log_path)}},
        "cache": {"exact": {"enabled": True}},
    }


@pytest.fixture
async def app_client(tmp_path: Path) -> AsyncIterator[TestClient[Any, Any]]:
    app = create_app(parse_config(full_config(tmp_path / "requests.sqlite3")))
    async with TestClient(TestServer(app)) as client:
        yield client
