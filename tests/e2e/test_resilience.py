"""Retries, the retry budget and the circuit breaker with a backup channel, end to end."""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.request
import uuid
from typing import Any

import openai

from tests.e2e.stack import Gateway
from tests.e2e.test_errors import post_raw

USER: Any = [{"role": "user", "content": "hello"}]


def ask(stack: Gateway, model: str) -> tuple[int, dict[str, str]]:
    # A fresh question each time, so no answer comes from the exact cache.
    question = f"resilience probe {uuid.uuid4().hex}"
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": question}]})
    status, _, headers = post_raw(stack, body.encode())
    return status, {k.lower(): v for k, v in headers.items()}


def metrics(stack: Gateway) -> str:
    with urllib.request.urlopen(stack.url + "/metrics", timeout=10) as response:
        return str(response.read().decode())


def test_a_flaky_primary_is_saved_by_a_retry(stack: Gateway) -> None:
    status, headers = ask(stack, "flaky")  # the upstream fails its first request only
    assert status == 200
    assert headers["x-gateway-retries"] == "1"
    assert headers["x-gateway-breaker"] == "flaky=closed"
    assert "x-gateway-fallback" not in headers
    assert 'hybrid_gateway_retries_total{channel="flaky",code="upstream_status_502"} 1.0' in (
        metrics(stack)
    )


def test_no_retry_for_a_rejected_request(stack: Gateway) -> None:
    status, headers = ask(stack, "fault-400")
    assert status == 400
    assert headers["x-gateway-retries"] == "0"


def test_a_failing_upstream_is_retried_then_mapped_as_before(stack: Gateway) -> None:
    status, headers = ask(stack, "fault-502")
    assert status == 502
    assert headers["x-gateway-retries"] == "2"  # the e2e schedule has two waits


def test_breaker_opens_and_the_backup_answers(stack: Gateway, sdk: openai.OpenAI) -> None:
    statuses: list[int] = []
    for _ in range(20):  # 3 failed attempts per request: the breaker opens after ~7
        status, headers = ask(stack, "failover")
        statuses.append(status)
        if headers.get("x-gateway-fallback") == "breaker":
            break
    assert statuses[-1] == 200 and set(statuses[:-1]) == {502}, statuses
    for _ in range(3):
        status, headers = ask(stack, "failover")
        assert status == 200
        assert headers["x-gateway-fallback"] == "breaker"
        assert headers["x-gateway-breaker"] == "failover-backup=closed"
        assert "channel=failover-backup" in headers["x-gateway-route"]
    raw = sdk.chat.completions.with_raw_response.create(model="failover", messages=USER,
                                                        stream=True)  # fmt: skip
    assert raw.headers["x-gateway-fallback"] == "breaker"
    assert "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    text = metrics(stack)
    assert 'hybrid_gateway_breaker_state{channel="failover"} 2.0' in text
    assert 'hybrid_gateway_breaker_state{channel="failover-backup"} 0.0' in text
    assert 'hybrid_gateway_breaker_transitions_total{channel="failover",to="open"} 1.0' in text
    rows = logged(stack, "failover", (0, "breaker"))
    assert (0, "breaker") in rows and (2, None) in rows


def logged(stack: Gateway, model: str, want: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """The request log's (retries, fallback) rows for ``model``, once ``want`` is among them."""
    deadline = time.monotonic() + 5
    while True:
        with sqlite3.connect(stack.config_path.parent / "requests.sqlite3") as db:
            rows = db.execute(
                "SELECT retries, fallback FROM requests WHERE model = ?", (model,)
            ).fetchall()
        if want in rows or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)
