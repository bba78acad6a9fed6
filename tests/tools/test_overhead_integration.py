"""`bench overhead` end to end: the real bare proxy, the real emulator, the real gateway, wrk."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from hybrid_gateway.tools.overhead.wrk import CHAT_PATH, WRK_INSTALL_HINT, find_wrk
from hybrid_gateway.tools.processes import (
    ManagedProcess,
    child_env,
    python_module_argv,
    start_process,
    stop_process,
)

BODY = {
    "model": "auto",
    "messages": [{"role": "user", "content": "What is the capital of France? #it-1"}],
    "max_tokens": 16,
}


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[ManagedProcess]:
    argv = python_module_argv(
        "hybrid_gateway.cli", "emulate", "--profile", "light", "--zero-delay",
        "--host", "127.0.0.1", "--port", "0",
    )  # fmt: skip
    proc = start_process("emulator", argv, tmp_path / "logs", timeout_s=60)
    yield proc
    stop_process(proc)


@pytest.fixture
def bare_proxy(tmp_path: Path, emulator: ManagedProcess) -> Iterator[ManagedProcess]:
    argv = python_module_argv(
        "hybrid_gateway.tools.overhead.bare_proxy", "--upstream", emulator.url, "--port", "0"
    )
    proc = start_process("bare", argv, tmp_path / "logs", timeout_s=60)
    yield proc
    assert stop_process(proc) == 0, "the bare proxy exits cleanly on SIGTERM"


async def test_bare_proxy_relays_a_chat_completion(
    emulator: ManagedProcess, bare_proxy: ManagedProcess
) -> None:
    assert bare_proxy.url.startswith("http://127.0.0.1:")
    async with aiohttp.ClientSession() as session:
        async with session.post(emulator.url + CHAT_PATH, json=BODY) as direct:
            assert direct.status == 200
            direct_body = await direct.json()
        async with session.post(bare_proxy.url + CHAT_PATH, json=BODY) as relayed:
            assert relayed.status == 200
            assert relayed.headers["Content-Type"].startswith("application/json")
            relayed_body = await relayed.json()
    assert relayed_body["object"] == "chat.completion"
    assert relayed_body["choices"][0]["message"]["role"] == "assistant"
    assert relayed_body["choices"][0]["message"]["content"]
    assert relayed_body["usage"]["completion_tokens"] > 0
    assert set(relayed_body) == set(direct_body)


async def test_bare_proxy_relays_error_statuses(bare_proxy: ManagedProcess) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            bare_proxy.url + CHAT_PATH,
            data=b"{not json",
            headers={"Content-Type": "application/json"},
        ) as resp,
    ):
        assert 400 <= resp.status < 500


def test_whole_command_smoke(tmp_path: Path) -> None:
    """One short run of the real command; needs wrk (fails, does not skip, without it)."""
    if find_wrk() is None:
        pytest.fail(WRK_INSTALL_HINT)
    out = tmp_path / "bench"
    argv = python_module_argv(
        "hybrid_gateway.cli", "bench", "overhead",
        "--duration", "1", "--warmup", "0", "--concurrency", "1", "--out", str(out),
    )  # fmt: skip
    proc = subprocess.run(
        argv, env=child_env(), capture_output=True, text=True, timeout=240, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (json_path,) = out.glob("overhead-*.json")
    assert json_path.with_suffix(".md").exists()
    report = json.loads(json_path.read_text())
    assert set(report) >= {"schema", "command", "machine", "settings", "results", "comparison"}
    assert set(report["machine"]) >= {"cpu_count", "python", "loop"}
    assert [(r["target"], r["concurrency"]) for r in report["results"]] == [
        ("emulator", 1),
        ("bare", 1),
        ("gateway", 1),
    ]
    for row in report["results"]:
        assert row["rps"] > 0, row
        assert row["errors"] == 0, row
        assert row["cpu_ms_per_request"] > 0, row
        assert row["peak_rss_mib"] > 0, row
    (comparison,) = report["comparison"]
    assert comparison["rps_ratio"] > 0
    assert {c["verdict"] for c in comparison["checks"]} <= {"PASS", "MISS"}
    assert "| target | conc | RPS |" in proc.stdout
