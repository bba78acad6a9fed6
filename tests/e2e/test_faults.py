"""The fault matrix, end to end: real emulators, a real gateway, the official OpenAI SDK.

Each fault is one test, and each says what the client sees and checks that no request is lost:
every request gets an answer, a fallback or a clear 4xx/5xx carrying its request id, and every
one of them has its row in the request log.  Times are short (deadline 0.5 s) so the matrix
stays quick; the bench (`hybrid-gateway bench degrade`) runs the same faults under load.
"""

from __future__ import annotations

import http.server
import json
import sqlite3
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.stack import Gateway, channel, closed_port, emulator, gateway, write_config

DEADLINE_S = 0.5


class Hooks:
    """A webhook receiver on loopback: records every POSTed body."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        received = self.bodies

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def wait_for(self, request_id: str, timeout_s: float = 10) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for body in self.bodies:
                if body.get("id") == request_id:
                    return body
            time.sleep(0.05)
        raise AssertionError(f"no webhook delivery for {request_id}: {self.bodies}")


@pytest.fixture(scope="module")
def hooks() -> Iterator[Hooks]:
    receiver = Hooks()
    receiver.thread.start()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


def fault_config(light: str, heavy: str, flaky: str, hook_url: str, log: Path) -> dict[str, Any]:
    def on_light(model: str, **extra: Any) -> dict[str, Any]:
        return channel(light + "/v1", model, **extra)

    channels = {
        "light-emu": on_light("light-model"),
        "heavy-emu": channel(heavy + "/v1", "heavy-model"),
        "flaky-heavy": channel(flaky + "/v1", "heavy-model"),  # 20 % of answers are HTTP 503
        "stalled": channel(heavy + "/v1", "m@stall=30"),  # no byte for 30 s
        "late": channel(heavy + "/v1", "m@stall=1.5"),  # answers, but after the deadline
        "midstream": on_light("m@midstream-reset"),
        "reset-heavy": channel(heavy + "/v1", "m@midstream-reset"),
        "slow": channel(heavy + "/v1", "m@slow=0.08"),  # bytes at once, then 80 ms a token
        "down": channel(f"http://127.0.0.1:{closed_port()}/v1", "m", connect_timeout_s=1),
        "limited": on_light("m@status=429@retry-after=2"),
        "narrow": on_light("m@stall=2", max_concurrency=1),
    }
    deadline = {"deadline_s": DEADLINE_S, "fallback_lane": "light"}
    lanes: dict[str, Any] = {
        "light": {"channel": "light-emu"},
        # each failed attempt goes to the backup at once: without retry_on_backup the backup
        # answers only while the breaker is open, and four failures in a row (p = 0.2 ** 4 per
        # request, about 9 % per run of 60) reach the client as a 502
        "heavy": {"channel": "flaky-heavy", "backup": "heavy-emu", "retry_on_backup": True},
        "stalled": {"channel": "stalled", **deadline},
        "late": {"channel": "late", **deadline},
        "slow": {"channel": "slow", **deadline},
        # the same slow answer, non-streamed, with the deadline on its first token
        "progress": {"channel": "slow", **deadline, "deadline_on": "first_token", "stall_s": 1},
        "progress-reset": {"channel": "reset-heavy", **deadline, "deadline_on": "first_token"},
        "midstream": {"channel": "midstream"},
        "down": {"channel": "down"},
        "limited": {"channel": "limited"},
        "narrow": {"channel": "narrow",
                   "queue": {"max_concurrency": 1, "max_waiting": 1, "timeout_s": 5}},
    }  # fmt: skip
    return {
        "server": {"host": "127.0.0.1", "port": 0,
                   "request_log": {"path": str(log), "flush_interval_ms": 50}},
        "channels": channels,
        "lanes": lanes,
        "models": [{"id": name, "lane": name} for name in lanes],
        "routing": {"default_lane": "light"},
        "cache": {"exact": {"enabled": True}},
        "resilience": {
            # short waits, and a budget that lets every failed attempt be retried
            "retry": {"backoff_s": [0.01, 0.02, 0.05], "max_retry_after_s": 0.05,
                      "budget_ratio": 1.0, "budget_min_per_s": 50},
            "deferred": {"webhook": {"url": hook_url, "backoff_s": [0.05, 0.1]}},
        },
    }  # fmt: skip


@pytest.fixture(scope="module")
def faults(
    emulators: tuple[str, str], hooks: Hooks, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    folder = tmp_path_factory.mktemp("faults")
    flaky_args = ("--zero-delay", "--error-rate", "0.2", "--error-status", "503", "--seed", "3")
    with emulator(folder, "flaky-emu", "--model", "heavy-model", *flaky_args) as flaky:
        config = fault_config(*emulators, flaky.url, hooks.url, folder / "requests.sqlite3")
        with gateway(write_config(folder / "gateway.yaml", config), "gateway-faults") as running:
            yield running


@pytest.fixture(scope="module")
def client(faults: Gateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=faults.base_url, api_key="x", max_retries=0, timeout=30) as sdk:
        yield sdk


def question(stem: str = "fault probe") -> list[Any]:
    return [{"role": "user", "content": f"{stem} {uuid.uuid4().hex}"}]


def log_rows(stack: Gateway, request_ids: list[str]) -> dict[str, tuple[Any, ...]]:
    """(status, error_code, fallback, lane) per request id, once all ids are in the log."""
    marks = ",".join("?" * len(request_ids))
    deadline = time.monotonic() + 10
    while True:
        with sqlite3.connect(stack.config_path.parent / "requests.sqlite3") as db:
            rows = db.execute(
                "SELECT request_id, status, error_code, fallback, lane, cost_usd FROM requests "
                f"WHERE request_id IN ({marks})",
                request_ids,
            ).fetchall()
        found = {row[0]: tuple(row[1:]) for row in rows}
        if len(found) == len(request_ids) or time.monotonic() > deadline:
            assert set(found) == set(request_ids), "a request is missing from the request log"
            return found
        time.sleep(0.05)


def get_result(stack: Gateway, request_id: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    url = f"{stack.url}/v1/gateway/results/{request_id}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), dict(exc.headers)


def test_heavy_channel_with_20_percent_errors_and_a_backup_answers_every_request(
    faults: Gateway, client: openai.OpenAI
) -> None:
    def ask(_: int) -> tuple[int, str, str, str]:
        raw = client.chat.completions.with_raw_response.create(
            model="heavy", messages=question(), max_tokens=8
        )
        headers = raw.headers
        fallback = headers.get("x-gateway-fallback", "")
        return raw.status_code, headers["x-request-id"], headers["x-gateway-retries"], fallback

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, range(60)))
    assert [status for status, *_ in answers] == [200] * 60  # success rate 100 %
    assert sum(int(retries) for _, _, retries, _ in answers) > 0  # the faults did happen
    # the backup answered each one that failed on the primary (or all, while a breaker is open)
    assert {fallback for *_, fallback in answers} <= {"", "failover", "breaker"}
    assert any(fallback for *_, fallback in answers)
    rows = log_rows(faults, [rid for _, rid, *_ in answers])
    assert {row[0] for row in rows.values()} == {200}


def test_heavy_stall_is_answered_by_the_light_lane_at_the_deadline(
    faults: Gateway, client: openai.OpenAI
) -> None:
    started = time.monotonic()
    raw = client.chat.completions.with_raw_response.create(model="stalled", messages=question())
    elapsed = time.monotonic() - started
    assert elapsed < 5  # not the 30 s stall
    assert raw.headers["x-gateway-fallback"] == "timeout"
    assert raw.headers["x-gateway-route"].startswith("lane=light; channel=light-emu")
    request_id = raw.headers["x-request-id"]
    assert raw.headers["x-gateway-result-url"] == f"/v1/gateway/results/{request_id}"
    assert raw.parse().choices[0].message.content
    status, body, _ = get_result(faults, request_id)
    assert (status, body["status"]) == (202, "pending")
    assert log_rows(faults, [request_id])[request_id][:3] == (200, None, "timeout")

    stream = client.chat.completions.with_raw_response.create(
        model="stalled", messages=question(), stream=True
    )
    assert stream.headers["x-gateway-fallback"] == "timeout"
    text = "".join(c.choices[0].delta.content or "" for c in stream.parse() if c.choices)
    assert "[light-model]" in text


def test_late_answer_is_stored_pushed_and_cached(
    faults: Gateway, client: openai.OpenAI, hooks: Hooks
) -> None:
    messages = question("late probe")
    raw = client.chat.completions.with_raw_response.create(model="late", messages=messages)
    request_id = raw.headers["x-request-id"]
    assert raw.headers["x-gateway-fallback"] == "timeout"
    assert "[light-model]" in (raw.parse().choices[0].message.content or "")

    pushed = hooks.wait_for(request_id)
    assert pushed["status"] == "done"
    late_text = pushed["response"]["choices"][0]["message"]["content"]
    assert "[heavy-model]" in late_text
    status, body, headers = get_result(faults, request_id)
    assert status == 200 and headers["x-gateway-deferred"] == "done"
    assert body["choices"][0]["message"]["content"] == late_text
    again = client.chat.completions.with_raw_response.create(model="late", messages=messages)
    assert again.headers["x-gateway-cache"] == "exact"  # the next asker gets the heavy answer
    assert again.parse().choices[0].message.content == late_text
    rows = log_rows(faults, [request_id, f"{request_id}.late"])
    assert rows[f"{request_id}.late"][:4] == (200, None, "late", "late")
    assert rows[f"{request_id}.late"][4] > 0  # the late answer's cost is logged


def test_unknown_result_ids_are_404(faults: Gateway) -> None:
    status, body, _ = get_result(faults, "req_does_not_exist")
    assert status == 404 and body["error"]["code"] == "request_not_found"


def test_connection_reset_mid_stream_ends_with_an_error_event_and_is_logged(
    faults: Gateway, client: openai.OpenAI
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="midstream", messages=question(), stream=True
    )
    request_id = raw.headers["x-request-id"]
    with pytest.raises(openai.APIError) as info:
        for _ in raw.parse():
            pass
    assert "broke the stream" in str(info.value.message)
    status, code, *_ = log_rows(faults, [request_id])[request_id]
    assert (status, code) == (502, "upstream_stream_broken")


def test_slow_stream_is_relayed_without_fallback(faults: Gateway, client: openai.OpenAI) -> None:
    started = time.monotonic()
    raw = client.chat.completions.with_raw_response.create(
        model="slow", messages=question(), stream=True, max_tokens=12
    )
    text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    assert time.monotonic() - started > DEADLINE_S  # longer than the deadline in all ...
    assert "x-gateway-fallback" not in raw.headers  # ... but its first byte came in time
    assert "[heavy-model]" in text
    request_id = raw.headers["x-request-id"]
    assert log_rows(faults, [request_id])[request_id][:3] == (200, None, None)


def test_a_slow_non_streamed_answer_falls_back_on_answer_and_not_on_first_token(
    faults: Gateway, client: openai.OpenAI
) -> None:
    """12 tokens at 80 ms: about 1 s, twice the deadline, but the first token comes at once."""
    on_answer = client.chat.completions.with_raw_response.create(
        model="slow", messages=question("slow, whole answer"), max_tokens=12
    )
    assert on_answer.headers["x-gateway-fallback"] == "timeout"
    started = time.monotonic()
    raw = client.chat.completions.with_raw_response.create(
        model="progress", messages=question("slow, first token"), max_tokens=12
    )
    assert time.monotonic() - started > DEADLINE_S
    assert "x-gateway-fallback" not in raw.headers
    answer = raw.parse()
    assert "[heavy-model]" in (answer.choices[0].message.content or "")
    assert answer.model == "progress" and answer.usage is not None
    assert answer.usage.completion_tokens > 0
    request_id = raw.headers["x-request-id"]
    assert log_rows(faults, [request_id])[request_id][:3] == (200, None, None)


def test_a_non_streamed_answer_whose_stream_breaks_is_answered_by_the_fallback(
    faults: Gateway, client: openai.OpenAI
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="progress-reset", messages=question("reset after the first token")
    )
    assert raw.headers["x-gateway-fallback"] == "timeout"
    assert raw.headers["x-gateway-route"].startswith("lane=light; channel=light-emu")
    assert "rule=broken:progress-reset" in raw.headers["x-gateway-route"]
    assert "[light-model]" in (raw.parse().choices[0].message.content or "")
    request_id = raw.headers["x-request-id"]
    rows = log_rows(faults, [request_id, f"{request_id}.late"])
    assert rows[request_id][:3] == (200, None, "timeout")
    assert rows[f"{request_id}.late"][:3] == (502, "upstream_stream_broken", "late")


def test_light_channel_down_is_a_clear_502_with_the_request_id(
    faults: Gateway, client: openai.OpenAI
) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="down", messages=question())
    error = info.value
    assert error.status_code == 502
    request_id = error.response.headers["x-request-id"]
    assert isinstance(error.body, dict) and error.body["request_id"] == request_id
    assert error.body["code"] == "upstream_connection_error"
    assert log_rows(faults, [request_id])[request_id][:2] == (502, "upstream_connection_error")


def test_upstream_429_with_retry_after_is_a_503_with_retry_after(
    faults: Gateway, client: openai.OpenAI
) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="limited", messages=question())
    error = info.value
    assert error.status_code == 503
    assert error.response.headers["retry-after"] == "2"  # the upstream's own Retry-After
    assert error.response.headers["x-gateway-retries"] == "3"
    assert isinstance(error.body, dict) and error.body["code"] == "upstream_rate_limited"
    request_id = error.response.headers["x-request-id"]
    assert log_rows(faults, [request_id])[request_id][:2] == (503, "upstream_rate_limited")


def test_a_full_lane_queue_refuses_with_retry_after_and_shows_in_metrics(
    faults: Gateway, client: openai.OpenAI
) -> None:
    def ask(_: int) -> tuple[int, str, str | None]:
        try:
            raw = client.chat.completions.with_raw_response.create(
                model="narrow", messages=question()
            )
            return raw.status_code, raw.headers["x-request-id"], None
        except openai.APIStatusError as exc:
            return (
                exc.status_code,
                exc.response.headers["x-request-id"],
                exc.response.headers["retry-after"],
            )

    depth = 'hybrid_gateway_lane_queue_depth{lane="narrow",channel="narrow"} 1.0'
    in_flight = 'hybrid_gateway_lane_in_flight{lane="narrow",channel="narrow"} 1.0'
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(ask, i) for i in range(3)]
        deadline = time.monotonic() + 1.5  # the first answer takes 2 s (m@stall=2)
        metrics = ""
        while not (depth in metrics and in_flight in metrics) and time.monotonic() < deadline:
            time.sleep(0.05)  # until all three are in: one running, one waiting, one refused
            with urllib.request.urlopen(faults.url + "/metrics", timeout=10) as response:
                metrics = response.read().decode()
        answers = sorted(f.result() for f in futures)
    assert depth in metrics and in_flight in metrics
    assert [a[0] for a in answers] == [200, 200, 503]
    assert answers[2][2] == "1"
    rows = log_rows(faults, [a[1] for a in answers])
    assert sorted(r[:2] for r in rows.values()) == [
        (200, None), (200, None), (503, "lane_queue_full")
    ]  # fmt: skip


def post(stack: Gateway, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
    request = urllib.request.Request(
        stack.url + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, raw, headers = response.status, response.read(), response.headers
    except urllib.error.HTTPError as exc:
        status, raw, headers = exc.code, exc.read(), exc.headers
    return status, json.loads(raw), {k.lower(): v for k, v in headers.items()}


@pytest.fixture(scope="module")
def shedding(
    emulators: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    folder = tmp_path_factory.mktemp("shedding")
    light = emulators[0] + "/v1"
    config = {
        "server": {"host": "127.0.0.1", "port": 0,
                   "request_log": {"path": str(folder / "requests.sqlite3"),
                                   "flush_interval_ms": 50}},
        "channels": {"light-emu": channel(light, "light-model"),
                     "broken": channel(light, "m@status=502")},
        "lanes": {"light": {"channel": "light-emu"}, "broken": {"channel": "broken"}},
        "models": [{"id": "auto"}, {"id": "light", "lane": "light"},
                   {"id": "broken", "lane": "broken"}],
        "routing": {"default_lane": "light"},
        # the only tenant while auth is off is "default": declared non-core here
        "tenants": {"default": {"core": False}},
        "resilience": {
            "retry": {"enabled": False},
            "shedding": {"enabled": True, "min_requests": 5, "error_rate": 0.5,
                         "recover_rate": 0.1, "status": 503, "retry_after_s": 20,
                         "link": "https://status.example.com", "simpler_model": "light"},
        },
    }  # fmt: skip
    with gateway(write_config(folder / "gateway.yaml", config), "gateway-shedding") as running:
        yield running


def test_error_spike_sheds_non_core_traffic_to_cache_only(shedding: Gateway) -> None:
    cached = question("shedding probe")
    status, _, before = post(shedding, {"model": "auto", "messages": cached})
    assert status == 200 and before["x-gateway-cache"] == "miss"
    ids = [before["x-request-id"]]
    for _ in range(4):  # the error spike: 4 of 5 answers are 5xx, shedding starts
        status, body, headers = post(shedding, {"model": "broken", "messages": question()})
        assert status == 502 and body["error"]["request_id"] == headers["x-request-id"]
        ids.append(headers["x-request-id"])

    status, _, hit = post(shedding, {"model": "auto", "messages": cached})
    assert status == 200 and hit["x-gateway-cache"] == "exact"  # cache hits still answer
    status, body, shed = post(shedding, {"model": "auto", "messages": question()})
    assert status == 503 and shed["x-gateway-fallback"] == "shed"
    assert shed["retry-after"] == "20"
    assert body["object"] == "chat.completion"
    assert body["system_fingerprint"] == "hybrid-gateway:shed"
    assert "https://status.example.com" in body["choices"][0]["message"]["content"]
    assert {o["type"] for o in body["x_gateway"]["options"]} == {
        "retry_later", "link", "simpler_answer"
    }  # fmt: skip
    status, _, simpler = post(shedding, {"model": "light", "messages": question()})
    assert status == 200 and "x-gateway-fallback" not in simpler  # the simpler answer offered
    ids += [hit["x-request-id"], shed["x-request-id"], simpler["x-request-id"]]
    rows = log_rows(shedding, ids)
    assert rows[shed["x-request-id"]][:3] == (503, None, "shed")
    with urllib.request.urlopen(shedding.url + "/metrics", timeout=10) as response:
        metrics = response.read().decode()
    assert "hybrid_gateway_shedding_active 1.0" in metrics
    assert 'hybrid_gateway_fallbacks_total{kind="shed"} 1.0' in metrics
