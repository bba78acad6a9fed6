"""Audits never change or delay a client's answer: a shadow lane and a judge that stall, fail
or answer off the rubric, behind a real gateway app and loopback upstreams (issue 23)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer

from hybrid_gateway.accounting.report import AuditCost, cost_report
from hybrid_gateway.accounting.report_cli import render
from hybrid_gateway.api.app import create_app
from hybrid_gateway.api.routes import RUNTIME
from hybrid_gateway.config import parse_config
from hybrid_gateway.learning.auditor import Auditor
from hybrid_gateway.learning.store import AuditRow, SqliteVerdictStore
from tests.learning.upstreams import Upstream, serving

LIGHT_TEXT = "⟦g1|wrong⟧ light answer"
HEAVY_TEXT = "⟦g1|ok⟧ heavy answer"
QUESTION = {"model": "auto", "messages": [{"role": "user", "content": "What is 6 x 7?"}]}


@dataclass
class Setup:
    client: TestClient[Any, Any]
    light: Upstream
    heavy: Upstream
    judge: Upstream
    log_path: Path

    @property
    def auditor(self) -> Auditor:
        auditor: Auditor | None = self.client.app[RUNTIME].auditor
        assert auditor is not None
        return auditor

    async def row(self, request_id: str) -> AuditRow | None:
        await self.auditor.drain()
        store = SqliteVerdictStore(self.log_path)
        try:
            return await store.get(request_id)
        finally:
            await store.aclose()


def gateway_config(urls: dict[str, str], log_path: Path, audit: dict[str, Any]) -> dict[str, Any]:
    channels = {
        name: {"base_url": url, "model": "m", "price_per_1m_input": 1.0,
               "price_per_1m_output": 2.0, "timeout_s": 30}
        for name, url in urls.items()
    }  # fmt: skip
    return {
        "channels": channels,
        "lanes": {name: {"channel": name} for name in urls},
        "routing": {"default_lane": "light"},
        "cache": {"exact": {"enabled": False}},
        "resilience": {"retry": {"enabled": False}},
        "server": {"request_log": {"path": str(log_path), "flush_interval_ms": 50}},
        "learning": {"audit": audit},
    }


@asynccontextmanager
async def gateway(
    tmp_path: Path,
    *,
    heavy: str = "answer",
    judge: str = "answer",
    judge_text: str = "A_WORSE",
    audit: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
    sections: dict[str, Any] | None = None,
) -> AsyncIterator[Setup]:
    ups = {"light": Upstream(LIGHT_TEXT), "heavy": Upstream(HEAVY_TEXT, heavy),
           "judge": Upstream(judge_text, judge)}  # fmt: skip
    log_path = tmp_path / "requests.sqlite3"
    async with AsyncExitStack() as stack:
        urls = {name: await stack.enter_async_context(serving(up)) for name, up in ups.items()}
        audit = audit or {"enabled": True, "router": {"rate": 1.0, "daily_usd_per_tenant": 10.0}}
        config = gateway_config(urls, log_path, audit)
        if server:
            config["server"]["request_log"].update(server)
        config.update(sections or {})
        client = TestClient(TestServer(create_app(parse_config(config))))
        await stack.enter_async_context(client)
        yield Setup(client, ups["light"], ups["heavy"], ups["judge"], log_path)


async def ask(client: TestClient[Any, Any], *, stream: bool = False) -> tuple[dict[str, str], str]:
    """The response headers and the answer text, within 5 s (an audit must not hold it)."""
    body = {**QUESTION, "stream": stream}

    async def call() -> tuple[dict[str, str], str]:
        response = await client.post("/v1/chat/completions", json=body)
        assert response.status == 200
        raw = await response.read()
        if not stream:
            return headers_of(response), orjson.loads(raw)["choices"][0]["message"]["content"]
        text = ""
        for line in raw.split(b"\n"):
            if line.startswith(b"data: {"):
                for choice in orjson.loads(line[6:])["choices"]:
                    text += choice["delta"].get("content", "")
        return headers_of(response), text

    return await asyncio.wait_for(call(), timeout=5)


def headers_of(response: ClientResponse) -> dict[str, str]:
    return {k.lower(): v for k, v in response.headers.items()}


def assert_untouched(headers: dict[str, str], text: str) -> None:
    assert text == LIGHT_TEXT
    assert "lane=light" in headers["x-gateway-route"]
    assert not any("audit" in k.lower() or "audit" in v for k, v in headers.items())


@pytest.mark.parametrize("stream", [False, True])
async def test_a_stalled_shadow_lane_neither_delays_nor_changes_the_answer(
    tmp_path: Path, stream: bool
) -> None:
    async with gateway(tmp_path, heavy="stall") as setup:
        headers, text = await ask(setup.client, stream=stream)
        assert_untouched(headers, text)
        for _ in range(100):  # the shadow request reaches the stalled upstream in the background
            if setup.heavy.bodies:
                break
            await asyncio.sleep(0.01)
        assert setup.auditor.in_flight == 1
        shadow = setup.heavy.bodies[0]
        assert "stream" not in shadow and shadow["max_tokens"] == 2 * 20 + 16
        headers, text = await ask(setup.client, stream=stream)  # the next one is not held either
        assert_untouched(headers, text)


async def test_a_failing_shadow_lane_leaves_a_row_without_verdict(tmp_path: Path) -> None:
    async with gateway(tmp_path, heavy="fail") as setup:
        headers, text = await ask(setup.client)
        assert_untouched(headers, text)
        row = await setup.row(headers["x-request-id"])
        assert row is not None and row.verdict is None and row.error == "shadow_failed"
        assert row.cost_usd == 0.0


@pytest.mark.parametrize(
    ("judge", "judge_text", "error"),
    [("stall", "", None), ("fail", "", "judge_failed"),
     ("answer", "I would say A_WORSE", "judge_refused")],
)  # fmt: skip
async def test_a_stalled_failing_or_rambling_llm_judge_changes_nothing(
    tmp_path: Path, judge: str, judge_text: str, error: str | None
) -> None:
    audit = {"enabled": True, "router": {"rate": 1.0, "daily_usd_per_tenant": 10.0},
             "judge": {"kind": "llm", "lane": "judge"}}  # fmt: skip
    async with gateway(tmp_path, judge=judge, judge_text=judge_text, audit=audit) as setup:
        headers, text = await ask(setup.client)
        assert_untouched(headers, text)
        if judge == "stall":
            for _ in range(200):
                if setup.judge.bodies:
                    break
                await asyncio.sleep(0.01)
            assert setup.auditor.in_flight == 1
            return
        row = await setup.row(headers["x-request-id"])
        assert row is not None and row.verdict is None and row.error == error
        assert row.rubric == "rubric-1"
        if judge == "answer":  # the judge saw the question and both answers, and was paid
            prompt = setup.judge.bodies[0]["messages"][1]["content"]
            assert "What is 6 x 7?" in prompt and LIGHT_TEXT in prompt and HEAVY_TEXT in prompt
            assert row.cost_usd == pytest.approx(2 * (10 * 1.0 + 20 * 2.0) / 1e6)


async def test_an_llm_verdict_is_stored_and_counted(tmp_path: Path) -> None:
    audit = {"enabled": True, "router": {"rate": 1.0, "daily_usd_per_tenant": 10.0},
             "judge": {"kind": "llm", "lane": "judge"}}  # fmt: skip
    async with gateway(tmp_path, judge_text="A_WORSE", audit=audit) as setup:
        headers, text = await ask(setup.client)
        assert_untouched(headers, text)
        row = await setup.row(headers["x-request-id"])
        assert row is not None
        assert (row.kind, row.verdict, row.lane_a, row.lane_b) == ("router", "a_worse", "light",
                                                                    "heavy")  # fmt: skip
        assert row.prompt is None  # prompts: none (the default): the judge alone saw the text
        metrics = await (await setup.client.get("/metrics")).text()
        assert 'hybrid_gateway_audits_total{kind="router",outcome="a_worse"} 1.0' in metrics
        assert 'hybrid_gateway_audit_cost_usd_total{kind="router"}' in metrics
        setup.client.app[RUNTIME].request_log.flush()
        report = cost_report(setup.log_path, 0.0, time.time() + 60, ["lane"])
        assert report.audit == (AuditCost("router", 1, row.cost_usd),)
        assert report.total.cost_usd == pytest.approx((10 * 1.0 + 20 * 2.0) / 1e6)  # the client's
        assert f"audit router: 1 audits, {row.cost_usd:.6f} USD" in render(report)


@pytest.mark.parametrize(("mode", "stored"), [("full", "What is 6 x 7?"), ("hash", None)])
async def test_the_stored_prompt_follows_the_request_log_setting(
    tmp_path: Path, mode: str, stored: str | None
) -> None:
    async with gateway(tmp_path, server={"prompts": mode}) as setup:
        headers, _ = await ask(setup.client)
        row = await setup.row(headers["x-request-id"])
        assert row is not None and row.verdict == "a_worse"  # the marks judge
        if stored is None:
            assert row.prompt is not None and len(row.prompt) == 64  # a SHA-256, not the text
        else:
            assert row.prompt == stored


async def test_an_excluded_tenant_and_a_busy_lane_are_not_audited(tmp_path: Path) -> None:
    audit = {"enabled": True, "router": {"rate": 1.0}, "exclude_tenants": ["default"]}
    async with gateway(tmp_path, audit=audit) as setup:
        headers, _ = await ask(setup.client)
        assert await setup.row(headers["x-request-id"]) is None
        assert setup.heavy.bodies == []
    async with gateway(
        tmp_path / "busy", audit={"enabled": True, "router": {"rate": 1.0}}
    ) as setup:
        runtime = setup.client.app[RUNTIME]
        runtime.degradation.shedder = None
        breaker = runtime.dispatcher.breaker("heavy")
        assert breaker is not None
        breaker.hold_open(60)  # the heavy lane's breaker is open: no audit may use it
        headers, text = await ask(setup.client)
        assert_untouched(headers, text)
        assert await setup.row(headers["x-request-id"]) is None
        assert setup.heavy.bodies == []
        metrics = await (await setup.client.get("/metrics")).text()
        assert 'hybrid_gateway_audits_skipped_total{kind="router",reason="breaker"} 1.0' in metrics


async def test_a_near_miss_is_judged_against_the_entry_and_moves_nothing_for_the_client(
    tmp_path: Path,
) -> None:
    """A miss whose nearest entry only the threshold refused: the llm judge compares the entry's
    answer with the fresh one; no shadow request, the client's answer untouched."""
    audit = {"enabled": True, "near_miss": {"rate": 1.0, "margin": 1.0},
             "judge": {"kind": "llm", "lane": "judge"}}  # fmt: skip
    semantic = {"enabled": True, "threshold": 0.99999, "guards": [],
                "path": str(tmp_path / "semantic.sqlite3")}  # fmt: skip
    sections = {"embedding": {"backend": "static"},
                "cache": {"exact": {"enabled": False}, "semantic": semantic}}  # fmt: skip
    async with gateway(tmp_path, judge_text="A_WORSE", audit=audit, server={"prompts": "full"},
                       sections=sections) as setup:  # fmt: skip
        client = setup.client
        first, second = (
            {"model": "auto", "messages": [{"role": "user", "content": text}]}
            for text in ("How do I reset my password?", "How can I reset my password?")
        )
        response = await client.post("/v1/chat/completions", json=first)
        assert response.status == 200 and response.headers["x-gateway-cache"] == "miss"
        await setup.auditor.drain()
        response = await asyncio.wait_for(client.post("/v1/chat/completions", json=second), 5)
        assert response.status == 200 and response.headers["x-gateway-cache"] == "miss"
        answer = orjson.loads(await response.read())["choices"][0]["message"]["content"]
        assert answer == LIGHT_TEXT
        row = await setup.row(response.headers["x-request-id"])
        assert row is not None
        assert (row.kind, row.verdict, row.lane_a, row.lane_b) == ("near_miss", "a_worse", None,
                                                                    "light")  # fmt: skip
        assert row.similarity is not None and row.similarity < 0.99999
        assert row.cached_prompt == "How do I reset my password?"
        assert len(setup.light.bodies) == 2 and setup.heavy.bodies == []  # no shadow request
        assert len(setup.judge.bodies) == 1 and row.cost_usd > 0  # the judge's call alone
        metrics = await (await client.get("/metrics")).text()
        assert 'hybrid_gateway_audits_total{kind="near_miss",outcome="a_worse"} 1.0' in metrics
        assert "hybrid_gateway_cache_false_hit_bound{" not in metrics  # served hits only
