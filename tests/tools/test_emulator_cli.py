"""`hybrid-gateway emulate` as a real subprocess: listening line, a request, clean SIGTERM."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import openai
import pytest

from hybrid_gateway.tools.emulator.cli import configure, run, settings_from_args

SRC = Path(__file__).resolve().parents[2] / "src"


def read_line(process: subprocess.Popen[str], timeout: float) -> str:
    """The first stdout line, without hanging the test if the server never prints it."""
    lines: list[str] = []
    stdout = process.stdout
    assert stdout is not None
    reader = threading.Thread(target=lambda: lines.append(stdout.readline()))
    reader.start()
    reader.join(timeout)
    if not lines:
        process.kill()
        raise AssertionError("the emulator printed no listening line")
    return lines[0]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cli_serves_and_exits_cleanly(sig: signal.Signals) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    command = [sys.executable, "-m", "hybrid_gateway.cli", "emulate", "--profile", "light"]
    process = subprocess.Popen(
        [*command, "--port", "0", "--zero-delay", "--model", "tiny"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = read_line(process, timeout=15)
        assert line.startswith("emulator listening on http://127.0.0.1:")
        url = line.strip().rsplit(" ", 1)[1]
        with openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as sdk:
            completion = sdk.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "ping"}]
            )
        assert (completion.choices[0].message.content or "").startswith("[tiny] ")
        process.send_signal(sig)
        assert process.wait(timeout=10) == 0
        assert process.stdout is not None and process.stdout.read() == ""  # exactly one line
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def parse_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser.parse_args(argv)


def test_flags_override_the_profile() -> None:
    args = parse_args(
        *("--profile", "heavy", "--max-num-seqs", "8", "--decode-step-ms", "40"),
        *("--error-rate", "0.1", "--error-status", "502", "--seed", "9", "--model", "qwen"),
    )
    settings = settings_from_args(args)
    assert settings.model == "qwen"
    assert settings.engine.max_num_seqs == 8 and settings.engine.decode_step_ms == 40.0
    assert settings.engine.kv_budget_tokens == 65536  # untouched: the heavy profile's
    assert (settings.faults.error_rate, settings.faults.error_status) == (0.1, 502)
    assert settings.faults.seed == 9 and not settings.zero_delay


def test_invalid_settings_exit_with_2_before_binding(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(parse_args("--error-rate", "1.5")) == 2
    assert "error_rate" in capsys.readouterr().err
