"""learning.router_update inside the gateway: the runtime follows the records store's live
version on its clock (gauge on /metrics), with the classifier's cascade on loads the version's
stored student, and the config errors name the field."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from hybrid_gateway.api.app import create_app
from hybrid_gateway.api.routes import RUNTIME
from hybrid_gateway.api.runtime import build_runtime
from hybrid_gateway.config import parse_config
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.learning.model_store import SqliteModelStore
from hybrid_gateway.learning.router_update import model_bytes
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.routing.build import DEFAULT_STUDENT_FILE, default_model_path
from hybrid_gateway.routing.classifier import load_model


def config(log: Path, prompts: str = "full") -> dict[str, Any]:
    return {
        "channels": {
            "small": {"base_url": "http://127.0.0.1:9/v1", "model": "s"},
            "big": {"base_url": "http://127.0.0.1:9/v1", "model": "b"},
        },
        "lanes": {"light": {"channel": "small"}, "heavy": {"channel": "big"}},
        "routing": {"classifier": {"model": "default", "threshold": 0.5}},
        "server": {"request_log": {"path": str(log), "prompts": prompts}},
        "learning": {
            "audit": {"enabled": True, "router": {"rate": 0.1}},
            "router_update": {"enabled": True, "min_labels": 20, "poll_s": 30},
        },
    }


async def test_the_gateway_follows_the_live_version(tmp_path: Path) -> None:
    log = tmp_path / "requests.sqlite3"
    clock = ManualClock()
    app = create_app(parse_config(config(log)), clock=clock)
    async with TestClient(TestServer(app)) as client:
        runtime = client.app[RUNTIME]
        assert runtime.router_live is not None and runtime.router_live.current is None
        assert (
            "hybrid_gateway_router_model_version 0.0" in await (await client.get("/metrics")).text()
        )
        shipped = load_model(default_model_path(), None)
        store = SqliteModelStore(log)
        store.add(1.0, shipped.namespace, {"source": "test"}, model_bytes(shipped))
        store.close()
        for _ in range(200):  # the first poll (at start) done: the task waits on the clock
            if clock.sleepers:
                break
            await asyncio.sleep(0.01)
        await clock.advance(30)
        for _ in range(200):  # the poll reads the table in a worker thread
            if runtime.router_live.current is not None:
                break
            await asyncio.sleep(0.01)
        assert runtime.router_live.current is not None
        assert runtime.router_live.current.version == 1
        text = await (await client.get("/metrics")).text()
        assert "hybrid_gateway_router_model_version 1.0" in text
        assert 'hybrid_gateway_router_updates_total{outcome="loaded"} 1.0' in text


async def test_with_the_cascade_on_the_gateway_loads_the_versions_student(
    tmp_path: Path,
) -> None:
    """The updater starts from the router's own file model and student (read once, at the
    router's build), and the version it loads brings its stored student."""
    log = tmp_path / "requests.sqlite3"
    shipped = load_model(default_model_path(), None)
    student = load_model(default_model_path(DEFAULT_STUDENT_FILE), None)
    store = SqliteModelStore(log)
    store.add(1.0, shipped.namespace, {"source": "test"}, model_bytes(shipped),
              model_bytes(student))  # fmt: skip
    store.close()
    raw = config(log)
    raw["routing"]["classifier"]["cascade"] = {"model": "default"}
    clock = ManualClock()
    async with TestClient(TestServer(create_app(parse_config(raw), clock=clock))) as client:
        runtime = client.app[RUNTIME]
        live = runtime.router_live
        assert live is not None and runtime.router_update is not None
        for _ in range(200):  # the first poll, at start, reads the table in a worker thread
            if live.current is not None:
                break
            await asyncio.sleep(0.01)
        assert live.current is not None and live.current.version == 1
        assert live.current.student is not None
        assert live.current.student.namespace == student.namespace


def test_the_update_needs_the_question_text(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"learning\.router_update\.enabled: false, or server"):
        build_runtime(parse_config(config(tmp_path / "r.sqlite3", prompts="none")),
                      config_path=None, clock=ManualClock())  # fmt: skip
    bare = config(tmp_path / "r.sqlite3")
    bare["learning"]["audit"]["router"]["rate"] = 0.0
    with pytest.raises(ConfigError, match=r"router_update\.enabled: false, or audit"):
        parse_config(bare)
