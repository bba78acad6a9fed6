"""Hot reload in a real gateway process: SIGHUP and POST /admin/reload swap the routing rules,
the tenants' quotas and the semantic cache's threshold; a request in flight finishes normally,
the next ones follow the new values, and a broken file is refused with the old config kept."""

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
    assert payload["error"]["param"] == "channels.light-emu.base_url"
    assert str(running.config_path) in payload["error"]["message"]
    assert rule_for(sdk, "gamma please, in some detail") == "kw-gamma"
    assert rule_for(sdk, "delta please, in some detail") != "kw-delta"
    sdk.close()


QUESTION, PARAPHRASE = "信用卡怎么激活", "信用卡如何激活？"


def quota_config(
    base: dict[str, Any], folder: Path, *, rate: dict[str, Any], daily: float, threshold: float
) -> dict[str, Any]:
    """``base`` with the semantic cache on (no exact cache) and quotas for tenant ``default``."""
    semantic = {"enabled": True, "path": str(folder / "semantic.sqlite3"), "threshold": threshold}
    tenant = {"rate": rate, "budget": {"daily": daily, "on_exceed": "refuse"}}
    return {**base, "cache": {"exact": {"enabled": False}, "semantic": semantic},
            "tenants": {"default": tenant}}  # fmt: skip


def ask(sdk: openai.OpenAI, text: str) -> dict[str, str]:
    raw = sdk.chat.completions.with_raw_response.create(
        model="light", messages=[{"role": "user", "content": text}], max_tokens=8
    )
    return dict(raw.headers)


def test_quotas_and_the_semantic_threshold_reload_with_a_stream_in_flight(
    base: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYBRID_GATEWAY_ADMIN_KEY", ADMIN_KEY)
    slow = {"requests_per_s": 0.001, "burst": 3}  # three requests, then one per 1000 s
    initial = quota_config(base, tmp_path, rate=slow, daily=100.0, threshold=0.98)
    path = write_config(tmp_path / "gateway.yaml", initial)
    with gateway(path, "gateway-quota-reload") as running:
        sdk = openai.OpenAI(base_url=running.base_url, api_key="x", max_retries=0, timeout=60)
        stream = sdk.chat.completions.create(
            model="heavy", stream=True,
            messages=[{"role": "user", "content": long_question("quota in flight", 140)}],
        )  # fmt: skip
        chunks = iter(stream)
        first = next(chunks)  # admitted and under way: 2 requests left
        assert ask(sdk, QUESTION)["x-gateway-cache"] == "miss"
        hit = ask(sdk, PARAPHRASE)
        assert hit["x-gateway-cache"] == "semantic"
        similarity = float(hit["x-gateway-cache-similarity"])
        with pytest.raises(openai.RateLimitError):
            ask(sdk, "one too many")

        # SIGHUP: a fast rate, a threshold above the paraphrase's similarity
        fast = {"requests_per_s": 1000, "burst": 3}
        strict = min(1.0, similarity + 0.002)
        write_config(path, quota_config(base, tmp_path, rate=fast, daily=100.0, threshold=strict))
        sighup_and_wait(running, "ok")
        rest = list(chunks)  # the stream admitted under the old quota finishes
        assert any(c.choices and c.choices[0].finish_reason == "stop" for c in rest)
        text = "".join(c.choices[0].delta.content or "" for c in [first, *rest] if c.choices)
        assert len(text.split()) > 40
        assert ask(sdk, PARAPHRASE)["x-gateway-cache"] == "miss"  # admitted; no longer a hit

        # the admin call: a daily cap below what was spent before the reloads
        write_config(path, quota_config(base, tmp_path, rate=fast, daily=1e-5, threshold=0.98))
        status, payload = post_reload(running)
        assert (status, sorted(payload["changed"])) == (200, ["cache.semantic", "tenants"])
        with pytest.raises(openai.APIStatusError) as refused:
            ask(sdk, "a question no cached answer fits")  # (a cache hit costs nothing)
        assert refused.value.status_code == 402  # the spend was kept, only the cap moved

        write_config(path, quota_config(base, tmp_path, rate=slow, daily=100.0, threshold=0.98))
        status, payload = post_reload(running)
        assert status == 200
        assert ask(sdk, QUESTION)["x-gateway-cache"] == "semantic"  # 0.98 again: a hit
        with pytest.raises(openai.RateLimitError):  # the slow rate again: the fill (3 at
            for i in range(3):  # most, one taken above) runs out and is not refilled
                ask(sdk, f"another question {i}")
        sdk.close()
