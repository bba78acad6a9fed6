"""The load generator as a real process against a real gateway and two quality emulators."""

from __future__ import annotations

import asyncio
import io
import random
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from aiohttp import web

from hybrid_gateway.tools.bench.client import parse_route
from hybrid_gateway.tools.bench.loadgen import LoadSettings, UsageError, check_loopback, run_load
from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.processes import child_env, python_module_argv
from hybrid_gateway.tools.workload.schema import Labels, WorkloadItem, write_workload
from tests.e2e.stack import Gateway, channel, closed_port, emulator, gateway, write_config

LONG = " Please explain the reasoning step by step, with the relevant formulas."


def item(id: str, text: str, group: str, light_ok: bool, stream: bool,
         arrival_ms: float = 0.0) -> WorkloadItem:  # fmt: skip
    labels = Labels(light_ok=light_ok, heavy_ok=True, complexity="simple", category="t/c",
                    source="test", group=group, lang="en", outcome="assumed")  # fmt: skip
    return WorkloadItem(id=id, arrival_ms=arrival_ms, tenant="t",
                        messages=({"role": "user", "content": text},), max_tokens=32,
                        expected_output_tokens=12, stream=stream, labels=labels)  # fmt: skip


# Short questions go to the light lane (rule short-single-turn), long ones to the heavy lane.
ITEMS = [
    item("pin", "How do I reset my PIN?", "g-pin", light_ok=True, stream=False),
    item("limit", "What is my card limit?", "g-limit", light_ok=False, stream=True),
    item("proof", "Why is the square root of two irrational?" + LONG, "g-proof", False, True),
    item("tides", "What causes the tides on Earth?" + LONG, "g-tides", False, False),
    item("pin-again", "How do I reset my PIN?", "g-pin", light_ok=True, stream=False),
]
BY_ID = {it.id: it for it in ITEMS}


def gateway_config(light_url: str, heavy_url: str, folder: Path) -> dict[str, object]:
    return {
        "server": {"host": "127.0.0.1", "port": 0,
                   "request_log": {"path": str(folder / "requests.sqlite3")}},
        "channels": {
            "light-emu": channel(light_url + "/v1", "light-model"),
            "heavy-emu": channel(heavy_url + "/v1", "heavy-model", price_per_1m_output=6.0),
        },
        "lanes": {"light": {"channel": "light-emu"}, "heavy": {"channel": "heavy-emu"}},
        "models": [{"id": "auto"}],
        "routing": {"default_lane": "heavy", "rules": [
            {"name": "short-single-turn", "when": {"max_chars": 60, "max_user_turns": 1},
             "lane": "light"},
        ]},
        "cache": {"exact": {"enabled": True}},
    }  # fmt: skip


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("workload") / "w.jsonl"
    write_workload(path, ITEMS, {"test": True})
    return path


@pytest.fixture(scope="module")
def stack(workload: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    folder = tmp_path_factory.mktemp("stack")
    quality = ("--workload", str(workload))
    with (
        emulator(folder, "light", "--profile", "light", "--model", "light-model", *quality) as lt,
        emulator(folder, "heavy", "--profile", "heavy", "--model", "heavy-model", *quality) as hv,
        gateway(
            write_config(folder / "gateway.yaml", gateway_config(lt.url, hv.url, folder))
        ) as running,
    ):
        yield running


def loadgen(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    argv = python_module_argv("hybrid_gateway.tools.bench.loadgen", *args)
    return subprocess.run(argv, capture_output=True, text=True, env=child_env(), timeout=timeout,
                          check=False)  # fmt: skip


def read_results(path: Path) -> list[RequestResult]:
    return [RequestResult.from_json(line) for line in path.read_bytes().splitlines()]


def test_closed_loop_records_every_request(stack: Gateway, workload: Path, tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    target = ("--base-url", stack.base_url, "--workload", str(workload), "--out", str(out))
    done = loadgen(*target, "--mode", "closed", "--concurrency", "4", "--duration", "2",
                   "--progress", "--start-offset", "1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = orjson.loads(done.stdout)
    assert done.stdout.count("\n") == 1 and "errors" in done.stderr  # the progress line
    results = read_results(out)
    # it started at item 1, went through the workload in order and says where to go on
    assert summary.pop("next_offset") == (1 + len(results)) % len(BY_ID)
    assert min(results, key=lambda r: r.start_s).item == list(BY_ID)[1]
    assert summary == {"requests": len(results), "errors": 0, "duration_s": 2.0}
    assert len(results) >= 10
    for result in results:
        it = BY_ID[result.item]
        assert (result.status, result.error_code, result.stream) == (200, None, it.stream)
        assert result.lane == ("light" if len(str(it.messages[0]["content"])) <= 60 else "heavy")
        assert result.channel == f"{result.lane}-emu" and result.rule is not None
        assert result.mark_group == it.labels.group
        assert result.mark_ok == (it.labels.light_ok if result.lane == "light" else True)
        assert result.cost_usd is not None
        assert result.cost_usd > 0 if result.cache == "miss" else result.cost_usd == 0
        if it.stream:
            assert result.ttft_ms is not None and 0 < result.ttft_ms <= result.latency_ms
        else:
            assert result.ttft_ms is None
        # the last one may start a hair after 2.0 s: its clock is read after the duration check
        assert 0 <= result.start_s < 2.0 + 0.1 and result.latency_ms > 0
    caches = {r.cache for r in results}
    assert caches == {"miss", "exact"}
    assert any(r.item == "pin-again" and r.cache == "exact" for r in results)


def test_open_loop_never_sends_early(stack: Gateway, tmp_path: Path) -> None:
    items = [
        item(f"o{i}", f"Open loop question number {i}?", f"g-o{i}", True, i % 2 == 0, i * 400.0)
        for i in range(5)
    ]
    path = tmp_path / "open.jsonl"
    write_workload(path, items, {})
    out = tmp_path / "open-results.jsonl"
    done = loadgen("--base-url", stack.base_url, "--workload", str(path), "--out", str(out),
                   "--mode", "open", "--time-scale", "2", "--duration", "0.7")  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = {r.item: r for r in read_results(out)}
    assert sorted(results) == ["o0", "o1", "o2", "o3"]  # o4 is due at 0.8 s, after the stage
    for it in items[:4]:
        due = it.arrival_ms / 1000 / 2
        assert due <= results[it.id].start_s < due + 0.25
        assert results[it.id].status == 200
    assert orjson.loads(done.stdout)["requests"] == 4


@pytest.mark.parametrize(
    "url", ["http://10.1.2.3:8080/v1", "http://example.com/v1", "ftp://127.0.0.1/"]
)
def test_refuses_non_loopback_targets(url: str, workload: Path, tmp_path: Path) -> None:
    out = tmp_path / "never.jsonl"
    done = loadgen("--base-url", url, "--workload", str(workload), "--out", str(out))
    assert done.returncode == 2 and done.stdout == ""
    assert not out.exists()


def test_loopback_check_and_route_parsing() -> None:
    for url in ("http://127.0.0.1:1/v1", "http://localhost:8080/v1", "http://[::1]:9/v1"):
        check_loopback(url)
    with pytest.raises(UsageError):
        check_loopback("http://192.168.0.1/v1")
    route = "lane=light; channel=light-local; rule=how-to-keywords"
    assert parse_route(route) == ("light", "light-local", "how-to-keywords")
    assert parse_route(None) == (None, None, None)


def settings(base_url: str, **changes: object) -> LoadSettings:
    base = LoadSettings(base_url=base_url, model="auto", mode="closed", concurrency=2,
                        duration_s=5.0, max_requests=3, timeout_s=5.0, seed=1,
                        time_scale=1.0)  # fmt: skip
    return replace(base, **changes)  # type: ignore[arg-type]


async def test_no_response_is_status_zero(tmp_path: Path) -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response()

    app = web.Application()
    app.router.add_post("/v1/chat/completions", slow)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        out = io.BytesIO()
        slow_url = f"http://127.0.0.1:{port}/v1"
        summary = await run_load(settings(slow_url, timeout_s=0.2), ITEMS, out)
        refused = io.BytesIO()
        await run_load(settings(f"http://127.0.0.1:{closed_port()}/v1"), ITEMS, refused)
    finally:
        await runner.cleanup()
    assert summary["requests"] == summary["errors"] == 3
    timed_out = [RequestResult.from_json(line) for line in out.getvalue().splitlines()]
    assert {(r.status, r.error_code) for r in timed_out} == {(0, "client_timeout")}
    assert all(200 <= r.latency_ms < 1000 for r in timed_out)
    failed = [RequestResult.from_json(line) for line in refused.getvalue().splitlines()]
    assert len(failed) == 3
    assert {(r.status, r.error_code) for r in failed} == {(0, "connection_error")}


async def test_poisson_arrivals_follow_the_seeded_schedule() -> None:
    async def answer(request: web.Request) -> web.Response:
        body = {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}
        return web.json_response(body)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
        out = io.BytesIO()
        load = settings(url, mode="open", rate=40.0, duration_s=1.0, max_requests=None,
                        start_offset=3, seed=5)  # fmt: skip
        summary = await run_load(load, ITEMS, out)
    finally:
        await runner.cleanup()
    gaps = random.Random("5:arrivals")
    due, schedule = 0.0, []
    while due < 1.0:
        schedule.append(due)
        due += gaps.expovariate(40.0)
    results = sorted(
        (RequestResult.from_json(line) for line in out.getvalue().splitlines()),
        key=lambda r: r.start_s,
    )
    assert summary["requests"] == len(results) == len(schedule)
    for result, expected in zip(results, schedule, strict=True):
        assert expected <= result.start_s < expected + 0.25  # never early
    # items in file order from the start offset, wrapping
    assert [r.item for r in results[:4]] == ["tides", "pin-again", "pin", "limit"]
    assert summary["next_offset"] == (3 + len(results)) % len(ITEMS)


def test_rate_needs_the_open_mode(workload: Path, tmp_path: Path) -> None:
    done = loadgen("--base-url", "http://127.0.0.1:9/v1", "--workload", str(workload),
                   "--out", str(tmp_path / "x.jsonl"), "--rate", "5")  # fmt: skip
    assert done.returncode == 2 and "--rate needs --mode open" in done.stderr
