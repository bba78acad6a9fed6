from __future__ import annotations

from pathlib import Path

import pytest

from hybrid_gateway.cli import main
from tests.test_config import EXAMPLE


def test_config_check_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "ok" in out and "lane light -> light-local" in out


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
