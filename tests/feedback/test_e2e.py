"""Feedback end to end: the official SDK asks, the answer's x-request-id is rated over HTTP,
read back, counted in /metrics and joined to its request row in the SQLite file."""

from __future__ import annotations

import json
import sqlite3
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.dashboard.live import live_gateway
from tests.e2e.stack import Gateway


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with live_gateway(tmp_path_factory.mktemp("feedback")) as running:
        yield running


def call(method: str, url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def ask(stack: Gateway, question: str, **extra: Any) -> str:
    with openai.OpenAI(base_url=stack.base_url, api_key="x", max_retries=0, timeout=30) as sdk:
        raw = sdk.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": question}], max_tokens=16, **extra
        )
        raw.parse()
        return str(raw.headers["x-request-id"])


def test_rate_an_answer_right_after_receiving_it(stack: Gateway) -> None:
    request_id = ask(stack, "prove that there are infinitely many primes")
    # No wait: the request may still be in the request log's journal, not yet in SQLite.
    status, saved = call("POST", stack.url + "/v1/feedback", {
        "request_id": request_id, "rating": "down", "reason": "too_slow",
        "comment": "a light model knows this",
    })  # fmt: skip
    assert status == 200
    assert saved["request"]["lane"] == "heavy" and saved["request"]["rule"] == "default"
    status, read = call("GET", f"{stack.url}/v1/feedback/{request_id}")
    assert status == 200 and read["rating"] == "down" and read["reason"] == "too_slow"

    with urllib.request.urlopen(stack.url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    assert (
        'hybrid_gateway_feedback_total{lane="heavy",cache="miss",rating="down",reason="too_slow"}'
        in text
    )

    with sqlite3.connect(stack.config_path.parent / "requests.sqlite3") as db:
        row = db.execute(
            "SELECT rating, reason, lane, rule, cache FROM rated_requests WHERE request_id = ?",
            (request_id,),
        ).fetchone()
    assert row == ("down", "too_slow", "heavy", "default", "miss")


def test_a_streamed_answer_can_be_rated(stack: Gateway) -> None:
    with (
        openai.OpenAI(base_url=stack.base_url, api_key="x", max_retries=0, timeout=30) as sdk,
        sdk.chat.completions.with_streaming_response.create(
            model="auto", stream=True, max_tokens=16,
            messages=[{"role": "user", "content": "how do i rotate my api key"}],
        ) as response,
    ):  # fmt: skip
        request_id = response.headers["x-request-id"]
        assert sum(1 for _ in response.iter_lines()) > 1
    status, saved = call("POST", stack.url + "/v1/feedback", {"request_id": request_id,
                                                              "rating": "up"})  # fmt: skip
    assert status == 200 and saved["request"]["lane"] == "light"


def test_errors_are_openai_shaped(stack: Gateway) -> None:
    status, body = call("POST", stack.url + "/v1/feedback", {"request_id": "req_nope",
                                                             "rating": "up"})  # fmt: skip
    assert status == 404 and body["error"]["code"] == "request_not_found"
    status, body = call("POST", stack.url + "/v1/feedback", {"rating": "up"})
    assert status == 400 and body["error"]["param"] == "request_id"
    assert body["error"]["request_id"].startswith("req_")
