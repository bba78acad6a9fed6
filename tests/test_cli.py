from __future__ import annotations

import argparse
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hybrid_gateway import __version__
from hybrid_gateway.cli import COMMANDS, command_parser, main
from hybrid_gateway.tools.processes import child_env, python_module_argv
from tests.test_config import EXAMPLE


def test_config_check_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "ok" in out and "lane light -> light-local" in out


def test_config_check_names_each_lanes_backup_and_deadline(
    capsys: pytest.CaptureFixture[str],
) -> None:
    full = EXAMPLE.parent / "gateway-full.yaml"
    assert main(["config", "check", str(full)]) == 0
    out = capsys.readouterr().out
    assert (
        "lane heavy -> heavy-local, backup heavy-backup, deadline 2 s on the first token, "
        "stall 2 s -> light"
    ) in out


def test_config_check_names_file_field_and_expectation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "gw.yaml"
    bad.write_text(EXAMPLE.read_text().replace("channel: light-local}", "channel: light-locl}"))
    assert main(["config", "check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"config error: {bad}: lanes.light.channel: a channel name" in err
    assert "got 'light-locl'" in err


def test_serve_refuses_a_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "gw.yaml"
    bad.write_text("channels: {}\nlanes: {}\nextra: 1\n")
    assert main(["serve", "--config", str(bad)]) == 2
    assert "extra: no such key" in capsys.readouterr().err


def test_help_and_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "serve" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2


def _walk(path: list[str], parser: argparse.ArgumentParser) -> Iterator[list[str]]:
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk([*path, name], sub)


def command_paths() -> list[list[str]]:
    paths: list[list[str]] = [[]]
    for name in COMMANDS:
        parser, _ = command_parser(name)
        paths.extend(_walk([name], parser))
    return paths


def test_every_help_in_the_command_tree_works(capsys: pytest.CaptureFixture[str]) -> None:
    paths = command_paths()
    assert ["bench", "degrade"] in paths and ["config", "check"] in paths
    for path in paths:
        with pytest.raises(SystemExit) as info:
            if not path:
                raise SystemExit(main(["--help"]))
            main([*path, "--help"])
        assert info.value.code == 0, path
        out = capsys.readouterr().out
        assert out.startswith("usage: hybrid-gateway"), path


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"hybrid-gateway {__version__}\n"


@pytest.mark.parametrize(
    ("argv", "wrong"),
    [
        (["serve", "--config", "gw.yaml", "--log-level", "verbose"], "--log-level"),
        (["serve", "--config", "gw.yaml", "--workers", "0"], "--workers"),
        (["serve", "--config", "gw.yaml", "--port", "70000"], "--port"),
        (["emulate", "--port", "http"], "--port"),
    ],
)
def test_a_bad_flag_value_is_one_line_and_exit_2(
    argv: list[str], wrong: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(f"hybrid-gateway {argv[0]}: error: argument {wrong}")


def _cli(*args: str, **options: Any) -> subprocess.Popen[str]:
    argv = python_module_argv("hybrid_gateway.cli", *args)
    return subprocess.Popen(argv, env=child_env(), text=True, stderr=subprocess.PIPE, **options)


@pytest.mark.parametrize("command", ["serve", "emulate", "serve --workers 2"])
def test_a_port_in_use_is_one_line_and_exit_2(command: str, tmp_path: Path) -> None:
    config = tmp_path / "gw.yaml"
    config.write_text(
        "server: {request_log: {enabled: false}}\n"
        "channels: {c: {base_url: 'http://127.0.0.1:9/v1', model: m}}\n"
        "lanes: {light: {channel: c}, heavy: {channel: c}}\n"
    )
    name, *options = command.split()
    if name == "serve":  # at WARNING: no config summary; --workers 2 warns of per-process state
        options += ["--config", str(config), "--log-level", "WARNING"]
    else:
        options.append("--zero-delay")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        child = _cli(name, *options, "--host", "127.0.0.1", "--port", port,
                     stdout=subprocess.PIPE)  # fmt: skip
        out, err = child.communicate(timeout=120)
    assert child.returncode == 2, err
    lines = [ln for ln in err.splitlines() if "level=WARNING" not in ln]
    assert lines == [
        f"hybrid-gateway {name}: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]
    assert "listening on" not in out


def test_config_check_into_a_closed_pipe_ends_without_a_traceback() -> None:
    # the reader is gone before the command writes: `hybrid-gateway config check FILE | head -0`
    child = _cli("config", "check", str(EXAMPLE), stdout=subprocess.PIPE)
    assert child.stdout is not None
    child.stdout.close()
    _, err = child.communicate(timeout=60)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert child.returncode == 141
