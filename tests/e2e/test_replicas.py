"""Two gateway replicas sharing one real Redis (``stores.backend: redis``), end to end.

Two ``serve`` processes (A and B, each its own port) on one config, a private
``redis-server`` and a zero-delay emulator; the official SDK as the client.  Checked: a
per-tenant rate limit holds across both replicas (not twice the limit), a budget is debited
once per request, a breaker opened by A's failures routes B's traffic, a deferred result
written through A is served by B, an exact-cache entry made through A is a hit through B, and
``serve --workers 2`` serves and stops cleanly.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
import sqlite3
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
import redis

from hybrid_gateway.tools.processes import python_module_argv, start_process, stop_process
from tests.e2e.stack import Gateway, channel, closed_port, emulator, gateway, write_config
from tests.stores.redis_server import RedisServer, unique_prefix

RATE = 20.0  # requests/s for the default tenant, across all replicas
BURST = 20
PRICE = {"price_per_1m_input": 1000.0, "price_per_1m_output": 1000.0}  # visible costs


@dataclass
class Replicas:
    a: Gateway
    b: Gateway
    redis: redis.Redis
    prefix: str
    emulator_url: str


def replica_config(emulator_url: str, redis_url: str, prefix: str, log: Path) -> dict[str, Any]:
    url = emulator_url + "/v1"
    return {
        "server": {"host": "127.0.0.1", "port": 0,
                   "request_log": {"path": str(log), "flush_interval_ms": 50}},
        "channels": {
            "fast": channel(url, "fast-model", **PRICE),
            "failing": channel(url, "m@status=502"),
            "backup": channel(url, "backup-model"),
            "late": channel(url, "m@stall=1.5"),
        },
        "lanes": {
            "fast": {"channel": "fast"},
            "failing": {"channel": "failing", "backup": "backup"},
            "late": {"channel": "late", "deadline_s": 0.3, "fallback_lane": "fast"},
        },
        "models": [{"id": name, "lane": name} for name in ("fast", "failing", "late")],
        "routing": {"default_lane": "fast"},
        "cache": {"exact": {"enabled": True}},
        "resilience": {
            "retry": {"enabled": False},
            "breaker": {"min_requests": 4, "error_rate": 0.5, "open_s": 60},
        },
        "tenants": {"default": {
            "rate": {"requests_per_s": RATE, "burst": BURST},
            "budget": {"daily": 1e6, "timezone": "UTC"},
        }},
        "stores": {"backend": "redis", "redis_url": redis_url, "key_prefix": prefix,
                   "sync_interval_ms": 100},
    }  # fmt: skip


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    folder = tmp_path_factory.mktemp("replicas")
    server = RedisServer(folder)
    server.start()
    prefix = unique_prefix()
    client = redis.Redis.from_url(server.url)
    try:
        with emulator(folder, "replica-emu", "--model", "fast-model", "--zero-delay") as emu:
            config = replica_config(emu.url, server.url, prefix, folder / "requests.sqlite3")
            path = write_config(folder / "gateway.yaml", config)
            with gateway(path, "replica-a") as a, gateway(path, "replica-b") as b:
                yield Replicas(a, b, client, prefix, emu.url)
    finally:
        client.close()
        server.stop()


def sdk(replica: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=replica.base_url, api_key="x", max_retries=0, timeout=30)


def ask(client: openai.OpenAI, model: str, text: str | None = None) -> Any:
    content = text or f"replica probe {uuid.uuid4().hex}"
    return client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": content}], max_tokens=8
    )


def http_get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_healthz_reports_the_shared_store(replicas: Replicas) -> None:
    for replica in (replicas.a, replicas.b):
        status, body = http_get(replica.url + "/healthz")
        assert status == 200
        assert body["status"] == "ok"
        assert body["store"]["backend"] == "redis" and body["store"]["up"] is True


def test_an_answer_cached_through_a_is_an_exact_hit_through_b(replicas: Replicas) -> None:
    text = f"cache me once {uuid.uuid4().hex}"
    with sdk(replicas.a) as a, sdk(replicas.b) as b:
        assert ask(a, "fast", text).headers["x-gateway-cache"] == "miss"
        assert ask(b, "fast", text).headers["x-gateway-cache"] == "exact"


def test_budget_is_debited_once_per_request_across_replicas(replicas: Replicas) -> None:
    day = dt.datetime.now(dt.UTC).date().isoformat()
    key = f"{replicas.prefix}budget:default:day:{day}"
    time.sleep(0.5)  # debits of earlier tests are in Redis by now (sync every 100 ms)
    before = float(replicas.redis.get(key) or 0)
    costs = []
    with sdk(replicas.a) as a, sdk(replicas.b) as b:
        for i in range(10):
            raw = ask(a if i % 2 else b, "fast")
            costs.append(float(raw.headers["x-gateway-cost-usd"]))
    expected = before + sum(costs)
    assert sum(costs) > 0
    deadline = time.monotonic() + 10  # debits leave each replica on its next sync (100 ms)
    while float(replicas.redis.get(key) or 0) < expected * 0.999 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # any double debit would land by now
    assert float(replicas.redis.get(key) or 0) == pytest.approx(expected, rel=1e-6)


def test_a_breaker_opened_by_a_routes_b_traffic_to_the_backup(replicas: Replicas) -> None:
    with sdk(replicas.a) as a, sdk(replicas.b) as b:
        for _ in range(4):  # A alone sees the primary fail: its breaker opens
            with pytest.raises(openai.APIStatusError):
                ask(a, "failing")
        opened = ask(a, "failing")
        assert opened.headers["x-gateway-fallback"] == "breaker"
        # B has never called the failing channel.  Documented delay: two sync intervals
        # (2 x 100 ms here); wait well past it, then B's first request must skip the primary.
        time.sleep(1.5)
        raw = ask(b, "failing")
        assert raw.headers["x-gateway-fallback"] == "breaker"
        assert "channel=backup" in raw.headers["x-gateway-route"]
    with urllib.request.urlopen(replicas.b.url + "/metrics", timeout=10) as response:
        metrics = response.read().decode()
    assert 'hybrid_gateway_breaker_state{channel="failing"} 2' in metrics  # open on B


def test_a_deferred_result_written_through_a_is_served_by_b(replicas: Replicas) -> None:
    with sdk(replicas.a) as a:
        raw = ask(a, "late")
    assert raw.headers["x-gateway-fallback"] == "timeout"
    url = replicas.b.url + raw.headers["x-gateway-result-url"]
    deadline = time.monotonic() + 10
    status, body = http_get(url)  # never 404: the answer waited for the pending entry's write
    while status in (202, 503) and time.monotonic() < deadline:  # 503: Redis blinked, retry
        time.sleep(0.1)
        status, body = http_get(url)
    assert status == 200
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"]


def test_the_tenant_rate_limit_holds_across_both_replicas(replicas: Replicas) -> None:
    """Last in the module: it empties the shared bucket."""
    time.sleep(BURST / RATE + 0.2)  # the bucket refills to its burst after the tests above
    stop = threading.Event()
    admitted: list[float] = []
    lock = threading.Lock()

    def hammer(replica: Gateway) -> None:
        with sdk(replica) as client:
            while not stop.is_set():
                try:
                    ask(client, "fast")
                except openai.RateLimitError:
                    continue
                with lock:
                    admitted.append(time.monotonic())

    seconds = 4.0
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        for i in range(8):
            pool.submit(hammer, replicas.a if i % 2 else replicas.b)
        time.sleep(seconds)
        stop.set()
    elapsed = max(admitted) - started
    rate = (len(admitted) - BURST) / elapsed  # what the refill let through after the burst
    steady = sum(1 for t in admitted if t >= started + 1.5) / (seconds - 1.5)
    print(f"admitted {len(admitted)} in {elapsed:.2f} s: {rate:.1f} req/s beyond the burst, "
          f"{steady:.1f} req/s after the first 1.5 s (limit {RATE}; two private buckets "
          f"would allow {2 * RATE})")  # fmt: skip
    assert len(admitted) <= BURST + RATE * elapsed * 1.1 + 1  # the bucket's own bound, + 10 %
    assert rate >= RATE * 0.75  # the load did reach the limit (loose: a busy 2-core box)


def test_serve_with_two_workers_serves_and_stops_gracefully(
    replicas: Replicas, tmp_path: Path
) -> None:
    config = {
        "server": {"host": "127.0.0.1", "port": 0,
                   "request_log": {"path": "requests.sqlite3", "flush_interval_ms": 50}},
        "channels": {"fast": channel(replicas.emulator_url + "/v1", "fast-model")},
        "lanes": {"fast": {"channel": "fast"}},
        "models": [{"id": "fast", "lane": "fast"}],
        "routing": {"default_lane": "fast"},
    }  # fmt: skip
    path = write_config(tmp_path / "gateway.yaml", config)
    argv = python_module_argv("hybrid_gateway.cli", "serve", "--config", str(path),
                              "--workers", "2")  # fmt: skip
    process = start_process("workers", argv, tmp_path / "logs", timeout_s=60)
    try:
        ids = []
        with openai.OpenAI(base_url=process.url + "/v1", api_key="x", max_retries=0) as client:
            for _ in range(12):  # new connections: the kernel spreads them over the workers
                raw = ask(client, "fast")
                ids.append(raw.headers["x-request-id"])
        process.popen.send_signal(signal.SIGTERM)
        assert process.popen.wait(timeout=30) == 0
    finally:
        stop_process(process)
    with sqlite3.connect(tmp_path / "requests.sqlite3") as db:
        marks = ",".join("?" * len(ids))
        rows = db.execute(f"SELECT count(*) FROM requests WHERE request_id IN ({marks})", ids)
        assert rows.fetchone()[0] == len(ids)  # every worker flushed its log on the way out


def outage_config(emulator_url: str, redis_url: str, prefix: str) -> dict[str, Any]:
    return {
        "server": {"host": "127.0.0.1", "port": 0, "request_log": {"enabled": False}},
        "channels": {"fast": channel(emulator_url + "/v1", "fast-model")},
        "lanes": {"fast": {"channel": "fast"}},
        "models": [{"id": "fast", "lane": "fast"}],
        "routing": {"default_lane": "fast"},
        "cache": {"exact": {"enabled": True}},
        "tenants": {"default": {"rate": {"requests_per_s": 1000}}},
        "stores": {"backend": "redis", "redis_url": redis_url, "key_prefix": prefix,
                   "sync_interval_ms": 100, "retry_s": 0.2, "rate_limits_on_outage": "open"},
    }  # fmt: skip


def wait_health(replica: Gateway, want: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    status, body = http_get(replica.url + "/healthz")
    while body["status"] != want and time.monotonic() < deadline:
        time.sleep(0.1)
        status, body = http_get(replica.url + "/healthz")
    assert status == 200 and body["status"] == want
    return body


def test_redis_dead_at_start_degrades_but_serves(replicas: Replicas, tmp_path: Path) -> None:
    dead = f"redis://127.0.0.1:{closed_port()}/0"
    path = write_config(tmp_path / "gateway.yaml", outage_config(replicas.emulator_url, dead, "d:"))
    with gateway(path, "dead-store") as running, sdk(running) as client:
        for _ in range(3):
            assert ask(client, "fast").status_code == 200  # limits fail open, cache bypassed
        body = wait_health(running, "degraded")
        assert body["store"]["up"] is False and body["store"]["errors"] >= 1
        with urllib.request.urlopen(running.url + "/metrics", timeout=10) as response:
            metrics = response.read().decode()
        assert 'hybrid_gateway_store_up{store="redis"} 0' in metrics
        assert 'hybrid_gateway_store_errors_total{store="redis",op=' in metrics


def test_redis_stopped_mid_run_then_back(replicas: Replicas, tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    server.start()
    config = outage_config(replicas.emulator_url, server.url, unique_prefix())
    path = write_config(tmp_path / "gateway.yaml", config)
    try:
        with gateway(path, "outage") as running, sdk(running) as client:
            text = f"outage probe {uuid.uuid4().hex}"
            assert ask(client, "fast", text).headers["x-gateway-cache"] == "miss"
            assert ask(client, "fast", text).headers["x-gateway-cache"] == "exact"
            server.stop()
            raw = ask(client, "fast", text)  # no crash, no error: the cache is bypassed
            assert raw.status_code == 200 and raw.headers["x-gateway-cache"] == "miss"
            wait_health(running, "degraded")
            server.start()  # empty: nothing was persisted
            wait_health(running, "ok")
            assert ask(client, "fast", text).headers["x-gateway-cache"] == "miss"
            assert ask(client, "fast", text).headers["x-gateway-cache"] == "exact"
    finally:
        server.stop()
