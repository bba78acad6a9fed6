"""wrk glue of `bench overhead`: the Lua script we generate and the summary line we parse."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp import web

from hybrid_gateway.tools.overhead.wrk import (
    CHAT_PATH,
    WRK_INSTALL_HINT,
    WrkError,
    WrkRun,
    find_wrk,
    lua_script,
    parse_wrk_output,
    run_wrk,
)

WRK_STDOUT = """\
Running 1s test @ http://127.0.0.1:40000
  2 threads and 20 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.76ms    1.01ms  14.20ms   80.00%
    Req/Sec     3.44k   300.00     4.00k    70.00%
  6850 requests in 1.00s, 2.10MB read
  Non-2xx or 3xx responses: 3
Requests/sec:   6848.12
Transfer/sec:      2.10MB
WRKJSON {"requests": 6850, "duration_us": 1000273, "bytes": 2202000, "connect": 0, "read": 1, \
"write": 0, "status": 3, "timeout": 2, "p50_us": 2755.0, "p95_us": 4500.5, "p99_us": 7765.0, \
"mean_us": 2760.1, "max_us": 14200.0}
"""


def require_wrk() -> str:
    wrk = find_wrk()
    if wrk is None:
        pytest.fail(WRK_INSTALL_HINT)
    return wrk


def test_parse_reads_the_summary_line() -> None:
    result = parse_wrk_output(WRK_STDOUT)
    assert result.requests == 6850
    assert result.duration_s == pytest.approx(1.000273)
    assert result.rps == pytest.approx(6850 / 1.000273)
    assert (result.p50_ms, result.p95_ms, result.p99_ms) == pytest.approx((2.755, 4.5005, 7.765))
    assert result.max_ms == pytest.approx(14.2)
    assert result.errors_status == 3
    assert result.errors == 3 + 1 + 2  # status + read + timeout


def test_parse_without_summary_line_raises() -> None:
    with pytest.raises(WrkError, match="no WRKJSON line"):
        parse_wrk_output("Running 1s test @ http://127.0.0.1:1\nunable to connect\n")


def test_parse_garbled_summary_line_raises() -> None:
    with pytest.raises(WrkError, match="unreadable"):
        parse_wrk_output('WRKJSON {"requests": 1}\n')


def test_zero_duration_gives_zero_rps() -> None:
    line = WRK_STDOUT.splitlines()[-1].replace('"duration_us": 1000273', '"duration_us": 0')
    assert parse_wrk_output(WRK_STDOUT.rsplit("WRKJSON", 1)[0] + line).rps == 0.0


def test_threads_are_min_of_connections_and_two() -> None:
    assert [WrkRun("http://x", c, 1).threads for c in (1, 2, 20, 50)] == [1, 2, 2, 2]


def test_lua_script_has_a_fresh_token_each_time() -> None:
    first, second = lua_script(), lua_script()
    assert first != second
    assert '"TOKEN1-"' in lua_script("TOKEN1")  # the tag: token, wrk thread, counter
    assert CHAT_PATH in first
    for hook in ("function setup(thread)", "function request()", "function done("):
        assert hook in first


def test_lua_script_rejects_a_token_that_would_break_json() -> None:
    with pytest.raises(ValueError, match="alphanumeric"):
        lua_script('a"b')


async def test_wrk_sends_a_unique_valid_body_per_request(tmp_path: Path) -> None:
    """Run the generated script through real wrk against a recording server."""
    wrk = require_wrk()
    bodies: list[bytes] = []

    async def record(request: web.Request) -> web.Response:
        bodies.append(await request.read())
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post(CHAT_PATH, record)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        run = WrkRun(f"http://{host}:{port}", connections=4, duration_s=1)
        result = await asyncio.to_thread(run_wrk, wrk, run, tmp_path)
    finally:
        await runner.cleanup()

    assert result.requests > 0
    assert result.errors == 0
    assert len(bodies) >= result.requests
    assert len(set(bodies)) == len(bodies), "a request body repeated: the exact cache would hit"
    decoded = [json.loads(b) for b in bodies]
    assert {d["model"] for d in decoded} == {"auto"}
    assert {d["max_tokens"] for d in decoded} == {16}
    contents = [d["messages"][0]["content"] for d in decoded]
    assert all(c.startswith("What is the capital of France? #") for c in contents)
    threads = {c.split("#", 1)[1].split("-")[1] for c in contents}
    assert threads == {"0", "1"}, "both wrk threads should have sent requests"
    assert not list(tmp_path.glob("*.lua")), "the script file is removed after the run"
