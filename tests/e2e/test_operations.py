"""Operational surface: health, metrics, concurrency limits, clients that hang up."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import urllib.request
import uuid
from typing import Any

import aiohttp
import openai

from tests.e2e.conftest import FAULTS
from tests.e2e.stack import Gateway, long_question


def get(url: str) -> tuple[int, str, dict[str, str]]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read().decode(), dict(response.headers)


def test_healthz(stack: Gateway) -> None:
    status, body, _ = get(stack.url + "/healthz")
    payload = json.loads(body)
    assert status == 200 and "light-emu" in payload["channels"]
    # degraded only by the channels other tests make fail on purpose (open breaker, 5xx in a row)
    named = {problem["channel"] for problem in payload["problems"]}
    assert named <= {*FAULTS, "refused"}
    assert payload["status"] == ("degraded" if named else "ok")


def test_metrics_count_what_was_served(stack: Gateway, sdk: openai.OpenAI) -> None:
    messages: Any = [{"role": "user", "content": f"metrics probe {uuid.uuid4().hex[:6]}"}]
    for _ in range(2):
        sdk.chat.completions.create(model="light", messages=messages, max_tokens=4)
    status, text, headers = get(stack.url + "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    lines = text.splitlines()
    hits = [ln for ln in lines if ln.startswith("hybrid_gateway_requests_total{")
            and 'model="light"' in ln and 'cache="exact"' in ln]  # fmt: skip
    assert hits and float(hits[0].rsplit(" ", 1)[1]) >= 1
    assert any(ln.startswith('hybrid_gateway_cost_usd_total{channel="light-emu"}') for ln in lines)
    assert "# TYPE hybrid_gateway_request_duration_seconds histogram" in lines


async def test_channel_concurrency_limit_answers_503_with_retry_after(stack: Gateway) -> None:
    sdk = openai.AsyncOpenAI(base_url=stack.base_url, api_key="x", max_retries=0, timeout=30)
    messages: Any = [{"role": "user", "content": "hold the only slot"}]

    async def ask(delay: float) -> int | str:
        await asyncio.sleep(delay)
        try:
            await sdk.chat.completions.create(model="narrow", messages=messages, max_tokens=4)
            return 200
        except openai.APIStatusError as exc:
            assert exc.response.headers["retry-after"] == "1"
            return f"{exc.status_code} {exc.code}"

    first, second = await asyncio.gather(ask(0), ask(0.6))
    await sdk.close()
    assert first == 200
    assert second == "503 lane_queue_timeout"


async def test_client_that_hangs_up_mid_stream_frees_the_upstream(
    stack: Gateway, emulators: tuple[str, str]
) -> None:
    heavy_url = emulators[1]
    question = long_question("long story", 140)
    body = {"model": "heavy", "stream": True, "max_tokens": 150,
            "messages": [{"role": "user", "content": question}]}  # fmt: skip
    async with aiohttp.ClientSession() as session:
        response = await session.post(stack.base_url + "/chat/completions", json=body)
        request_id = response.headers["x-request-id"]
        assert (await response.content.readline()).startswith(b"data: ")
        response.close()  # hang up with the answer far from finished
        deadline = time.monotonic() + 10
        running = -1
        while time.monotonic() < deadline:
            async with session.get(heavy_url + "/stats") as stats:
                running = (await stats.json())["running"]
            if running == 0:
                break
            await asyncio.sleep(0.05)
    assert running == 0, "the upstream request was cancelled and its batch slot freed"
    log_path = stack.config_path.parent / "requests.sqlite3"
    row = None
    while row is None and time.monotonic() < deadline + 5:
        with sqlite3.connect(log_path) as db:
            row = db.execute(
                "SELECT status, error_code, completion_tokens, cost_usd FROM requests "
                "WHERE request_id = ?",
                (request_id,),
            ).fetchone()
        await asyncio.sleep(0.05)
    assert row is not None and row[:2] == (499, "client_closed_request")
    assert row[2] > 0 and row[3] > 0  # what was generated before the hang-up is billed


def test_stream_is_relayed_while_the_upstream_is_still_generating(
    stack: Gateway, emulators: tuple[str, str], sdk: openai.OpenAI
) -> None:
    messages: Any = [{"role": "user", "content": long_question("a long answer please", 120)}]
    stream = sdk.chat.completions.create(
        model="heavy", messages=messages, max_tokens=120, stream=True
    )
    chunks = iter(stream)
    first = next(chunks)
    _, stats, _ = get(emulators[1] + "/stats")
    assert json.loads(stats)["running"] >= 1, "first chunk arrived before the upstream finished"
    rest = list(chunks)
    assert first.choices and len(rest) > 10
