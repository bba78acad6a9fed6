"""`bench overhead --pipeline full`: prompts, config, the open-loop client, the report, and
the whole command once, briefly, with the real gateway, embedder and wrk."""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp import web

from hybrid_gateway.config import load_config, parse_config
from hybrid_gateway.tools.overhead.full import full_config
from hybrid_gateway.tools.overhead.full_args import parse_setting
from hybrid_gateway.tools.overhead.full_report import (
    FullRun,
    build_full_report,
    render_full_markdown,
)
from hybrid_gateway.tools.overhead.openloop import OpenLoopResult, percentile, run_open_loop
from hybrid_gateway.tools.overhead.prompts import prompt_text
from hybrid_gateway.tools.overhead.stages import STAGES, StageProfile
from hybrid_gateway.tools.overhead.wrk import CHAT_PATH, WrkRun, find_wrk, lua_script, run_wrk
from hybrid_gateway.tools.processes import child_env, python_module_argv
from tests.tools.test_overhead_report import level

Handler = Callable[[web.Request], Awaitable[web.Response]]


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[str]:
    """A loopback server answering the chat path with ``handler``; yields its URL."""
    app = web.Application()
    app.router.add_post(CHAT_PATH, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def test_prompt_kinds_have_the_sizes_the_issue_names() -> None:
    short = prompt_text("short", "abc123def456-0-7", 7)
    long = prompt_text("long", "abc123def456-0-7", 7)
    assert 50 <= len(short) <= 70
    assert 1_900 <= len(long) <= 2_300
    assert prompt_text("long", "t-0-8", 8) != prompt_text("long", "t-0-7", 7)
    with pytest.raises(ValueError):
        prompt_text("huge", "t", 1)
    with pytest.raises(ValueError):
        lua_script(prompt="huge")


async def test_wrk_sends_the_same_long_text_as_prompt_text(tmp_path: Path) -> None:
    wrk = find_wrk()
    if wrk is None:
        pytest.skip("wrk is not installed")
    contents: list[str] = []

    async def record(request: web.Request) -> web.Response:
        contents.append(json.loads(await request.read())["messages"][0]["content"])
        return web.json_response({"ok": True})

    async with serving(record) as url:
        run = WrkRun(url, connections=1, duration_s=1, prompt="long")
        await asyncio.to_thread(run_wrk, wrk, run, tmp_path)
    first = contents[0]
    tag = first.rsplit("Question ", 1)[1].split(":", 1)[0]
    assert first == prompt_text("long", tag, int(tag.rsplit("-", 1)[1]))
    assert len(set(contents)) == len(contents)


def test_full_config_is_a_valid_gateway_config_and_takes_settings() -> None:
    settings = [parse_setting("embedding.max_wait_ms=2"), parse_setting("cache.semantic.x.y=on")]
    config = full_config("http://127.0.0.1:9", settings[:1])
    parsed = parse_config(config)
    assert parsed.cache.semantic.enabled and parsed.routing.classifier is not None
    # both cascades on, as in examples/gateway-full.yaml
    full = load_config(Path(__file__).parents[2] / "examples" / "gateway-full.yaml")
    assert full.routing.classifier is not None and full.cache.semantic.cascade is not None
    assert parsed.routing.classifier.cascade == full.routing.classifier.cascade
    assert parsed.cache.semantic.cascade == full.cache.semantic.cascade
    assert parsed.cache.semantic.write_behind
    assert parsed.embedding.max_wait_ms == 2
    assert settings[1] == ("cache.semantic.x.y", True)
    for bad in ("nokey", "=3", "a..b=1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_setting(bad)


async def test_open_loop_counts_latency_from_the_due_time_and_errors() -> None:
    calls = 0

    async def answer(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        return web.json_response({"ok": True}, status=500 if calls == 3 else 200)

    async with serving(answer) as url:
        result = await asyncio.to_thread(run_open_loop, url, 20, 0.5, "short")
    assert result.sent == 10 and calls == 10 and result.errors == 1
    assert 0 < result.p50_ms <= result.p99_ms <= result.max_ms
    assert percentile([], 99) == 0.0 and percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0


async def test_open_loop_warm_up_is_sent_and_not_counted() -> None:
    calls = 0

    async def answer(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        return web.json_response({"ok": True}, status=500 if calls <= 4 else 200)

    async with serving(answer) as url:  # the 4 failures fall in the 0.2 s warm-up
        result = await asyncio.to_thread(run_open_loop, url, 20, 0.5, "short", 0.2)
    assert calls == 14 and result.sent == 10 and result.errors == 0


def test_report_ratios_goals_and_stage_rest() -> None:
    levels = [level("bare", 50, 10_000, 3.0), level("gateway", 50, 8_000, 4.0),
              level("full", 50, 2_400, 6.0)]  # fmt: skip
    stage = StageProfile("classic", 5, dict.fromkeys(STAGES, 0.1), entries=9, embed_batch_ms=0.5,
                         embed_alone_ms=0.1)  # fmt: skip
    run = FullRun(argv=["hybrid-gateway", "bench", "overhead", "--pipeline=full"], settings={},
                  levels=levels, stages=[stage],
                  open_loop=[("gateway", "short", OpenLoopResult(100, 5, 500, 0, 2.0, 9.0, 12.0)),
                             ("full", "short", OpenLoopResult(100, 5, 500, 0, 4.0, 20.0, 30.0))],
                  outcomes=[{"prompt": "short", "cache": "miss", "checks": "", "rule":
                             "classifier", "requests": 7}])  # fmt: skip
    report = build_full_report(run)
    (row,) = report["comparison"]
    assert row["rps_ratio_to_pass_through"] == 0.3 and row["full_cpu_ms_per_request"] == 2.5
    (loop,) = report["open_loop"]
    assert loop["open_loop_p99_added_ms"] == 11.0
    (profile,) = report["stages"]
    # 2.5 ms under load - (8 stages x 0.1 - embed 0.1 + embed 0.1 x batched 0.5 / alone 0.1)
    assert profile["rest_ms"] == pytest.approx(2.5 - 1.2)
    # stages one at a time dearer than the request under load (unseen static tokens): no rest
    slow = StageProfile("classic", 5, dict.fromkeys(STAGES, 1.0), embed_alone_ms=0.1)
    assert build_full_report(replace(run, stages=[slow]))["stages"][0]["rest_ms"] is None
    goals = {(g["prompt"], g["goal"]): g["verdict"] for g in report["goals"]}
    assert goals[("short", "open_loop_p99_added_ms")] == "MET"
    assert goals[("long", "rps_ratio_to_pass_through")] == "n/a"
    text = render_full_markdown(report)
    assert "| full | classic | 50 |" in text and "| short | miss | - | classifier | 7 |" in text


@pytest.mark.timeout(600)
def test_whole_full_pipeline_command_smoke(tmp_path: Path) -> None:
    if find_wrk() is None:
        pytest.skip("wrk is not installed")
    out = tmp_path / "bench"
    argv = python_module_argv(
        "hybrid_gateway.cli", "bench", "overhead", "--pipeline", "full", "--duration", "1",
        "--warmup", "0", "--concurrency", "4", "--prompts", "short", "--rate", "5",
        "--profile-requests", "2", "--out", str(out),
        "--full-set", "cache.semantic.write_behind=false",
    )  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=540, env=child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    (json_path,) = out.glob("overhead-full-*.json")
    report = json.loads(json_path.read_text())
    assert {r["target"] for r in report["results"]} == {"bare", "gateway", "full"}
    assert report["settings"]["full_set"] == {"cache.semantic.write_behind": False}
    assert report["command"].endswith("--full-set=cache.semantic.write_behind=false")
    # both cascades on: every question gets a static vector, e5 only where a cascade defers
    stages = report["stages"][0]["cpu_ms_per_request"]
    assert stages["static"] > 0 and stages["embed"] >= 0
    assert any(o["cache"] == "miss" for o in report["outcomes"])
    assert (out / json_path.name.replace(".json", ".md")).exists()


def test_the_stage_profile_counts_guards_wherever_the_rule_ran_them() -> None:
    """The cascade's rule runs its guards from the static bound up: the profile moves their
    CPU from ``search`` to ``guards`` there too, not only above e5's threshold."""
    from hybrid_gateway.cache.semantic.cache import CacheBounds, SemanticCache
    from hybrid_gateway.cache.semantic.cascade import CascadeRule
    from hybrid_gateway.cache.semantic.decision import DecisionRule
    from hybrid_gateway.resilience.clock import ManualClock
    from hybrid_gateway.tools.overhead.stages import _judge_cpu

    bounds = CacheBounds(ttl_s=60, max_entries=10, max_bytes=1 << 20)
    question, candidate = (prompt_text("long", f"tag{n}", n) for n in (1, 2))
    rules = {
        "cascade": CascadeRule(0.99, ("numbers", "order"), None, static_bound=0.5),
        "plain": DecisionRule(0.99, ("numbers", "order")),
    }
    spent = {}
    for name, rule in rules.items():
        cache = SemanticCache(bounds=bounds, rule=rule, clock=ManualClock())
        spent[name] = _judge_cpu(cache, question, candidate, 0.8, None)  # type: ignore[arg-type]
    assert spent["cascade"][0] > 0  # 0.8 is over the bound: the guards ran and are counted
    assert spent["plain"] == (0.0, 0.0)  # under e5's threshold: nothing ran
