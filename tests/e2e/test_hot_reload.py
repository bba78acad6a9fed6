"""Hot reload in a real gateway process: SIGHUP and POST /admin/reload swap the routing rules,
a request in flight finishes normally, and a broken file is refused with the old rules kept."""

from __future__ import annotations

import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from tests.e2e.conftest import e2e_config
from tests.e2e.stack import Gateway, gateway, long_question, write_config

ADMIN_KEY = "e2e-reload-admin-key"


def with_keyword(config: dict[str, Any], keyword: str) -> dict[str, Any]:
    """``config`` whose first rule sends ``keyword`` to the light lane, named after it."""
    rules = list(config["routing"]["rules"])
    rules[0] = {"name": f"kw-{keyword}", "when": {"keywords_any": [keyword]}, "lane": "light"}
    return {**config, "routing": {**config["routing"], "rules": rules}}


@pytest.fixture
def base(emulators: tuple[str, str], tmp_path: Path) -> dict[str, Any]:
    return e2e_config(*emulators, tmp_path / "requests.sqlite3")


@pytest.fixture
def running(
    base: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Gateway]:
    monkeypatch.setenv("HYBRID_GATEWAY_ADMIN_KEY", ADMIN_KEY)
    with gateway(write_config(tmp_path / "gateway.yaml", with_keyword(base, "alpha"))) as gw:
        yield gw


def rule_for(sdk: openai.OpenAI, text: str) -> str:
    raw = sdk.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": text}], max_tokens=4
    )
    route = dict(part.split("=", 1) for part in raw.headers["x-gateway-route"].split("; "))
    return route["rule"]


def reloads(gw: Gateway, outcome: str) -> float:
    with urllib.request.urlopen(gw.url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    line = f'hybrid_gateway_config_reloads_total{{outcome="{outcome}"}} '
    values = [float(row[len(line) :]) for row in text.splitlines() if row.startswith(line)]
    return values[0] if values else 0.0


def sighup_and_wait(gw: Gateway, outcome: str) -> None:
    """Signal the gateway and wait until it has counted the reload's ``outcome``."""
    before = reloads(gw, outcome)
    os.kill(gw.process.pid, signal.SIGHUP)
    deadline = time.monotonic() + 20
    while reloads(gw, outcome) == before:
        assert time.monotonic() < deadline, "the gateway did not count the reload"
        time.sleep(0.05)


def post_reload(gw: Gateway) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        gw.url + "/admin/reload", method="POST",
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, orjson.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, orjson.loads(error.read())


def test_sighup_swaps_the_rules_without_dropping_a_stream_in_flight(
    running: Gateway, base: dict[str, Any]
) -> None:
    sdk = openai.OpenAI(base_url=running.base_url, api_key="x", max_retries=0, timeout=60)
    assert rule_for(sdk, "alpha please, in some detail") == "kw-alpha"
    stream = sdk.chat.completions.create(
        model="heavy", stream=True,
        messages=[{"role": "user", "content": long_question("in flight", 140)}],
    )  # fmt: skip
    chunks = iter(stream)
    first = next(chunks)  # the slow request is under way ...
    write_config(running.config_path, with_keyword(base, "beta"))
    sighup_and_wait(running, "ok")  # ... when the rules change
    assert rule_for(sdk, "beta please, in some detail") == "kw-beta"
    assert rule_for(sdk, "alpha please, in some detail") != "kw-alpha"
    rest = list(chunks)
    assert any(c.choices and c.choices[0].finish_reason == "stop" for c in rest)
    text = "".join(c.choices[0].delta.content or "" for c in [first, *rest] if c.choices)
    assert len(text.split()) > 40  # the whole long answer, not a cut-off one

    running.config_path.write_text("routing: [broken\n")
    sighup_and_wait(running, "rejected")
    assert rule_for(sdk, "beta please, in some detail") == "kw-beta"
    assert "config reload (SIGHUP) rejected" in running.process.stderr_path.read_text()
    sdk.close()


def test_admin_reload_swaps_the_rules_and_refuses_a_broken_file(
    running: Gateway, base: dict[str, Any]
) -> None:
    sdk = openai.OpenAI(base_url=running.base_url, api_key="x", max_retries=0, timeout=60)
    write_config(running.config_path, with_keyword(base, "gamma"))
    status, payload = post_reload(running)
    assert (status, payload["changed"]) == (200, ["routing"])
    assert rule_for(sdk, "gamma please, in some detail") == "kw-gamma"

    broken = with_keyword(base, "delta")
    broken["channels"] = {**broken["channels"], "light-emu": {**broken["channels"]["light-emu"],
                          "base_url": "http://127.0.0.1:9/v1"}}  # fmt: skip
    write_config(running.config_path, broken)
    status, payload = post_reload(running)
    assert status == 400
    assert payload["error"]["code"] == "config_rejected"
    assert payload["error"]["param"] == "channels"
    assert str(running.config_path) in payload["error"]["message"]
    assert rule_for(sdk, "gamma please, in some detail") == "kw-gamma"
    assert rule_for(sdk, "delta please, in some detail") != "kw-delta"
    sdk.close()
