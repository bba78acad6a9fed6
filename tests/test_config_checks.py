"""`config check` refuses what `serve` would refuse while building its runtime (config_checks.py):
one line naming the file, the field and what was expected, exit 2; every example passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hybrid_gateway.cli import main
from hybrid_gateway.config import GatewayConfig, parse_config
from hybrid_gateway.config_checks import cross_checks
from hybrid_gateway.errors import ConfigError
from tests.test_config import minimal

# the example gateway configs (router-exemplars.yaml is an exemplar file, not a config)
EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("gateway*.yaml"))
NO_LOG = {"request_log": {"enabled": False}}
CLASSIFIER = {"classifier": {"model": "default", "threshold": 0.5}}
AUDIT_ROUTER = {"enabled": True, "router": {"rate": 0.1}}

BAD: dict[str, tuple[dict[str, Any], str, str]] = {
    "cascade-static": (
        {"embedding": {"backend": "static"},
         "cache": {"semantic": {"enabled": True, "cascade": {"static_bound": 0.8}}}},
        "cache.semantic.cascade", "null with embedding.backend static",
    ),
    "router-cascade-static": (
        {"embedding": {"backend": "static"},
         "routing": {"classifier": {"model": "default", "cascade": {"margin": 1}}}},
        "routing.classifier.cascade", "null with embedding.backend static",
    ),
    "audit-no-log": (
        {"server": NO_LOG, "learning": {"audit": {"enabled": True}}},
        "learning.audit.enabled", "false, or server.request_log.enabled: true",
    ),
    "threshold-no-semantic": (
        {"learning": {"audit": {"enabled": True, "cache": {"rate": 0.1}},
                      "cache_threshold": {"enabled": True}}},
        "learning.cache_threshold.enabled", "false, or cache.semantic.enabled: true",
    ),
    "update-no-classifier": (
        {"server": {"request_log": {"prompts": "full"}},
         "learning": {"audit": AUDIT_ROUTER, "router_update": {"enabled": True}}},
        "learning.router_update.enabled", "false, or routing.classifier set",
    ),
    "update-no-log": (
        {"routing": CLASSIFIER, "server": NO_LOG,
         "learning": {"router_update": {"enabled": True, "train": False}}},
        "learning.router_update.enabled", "false, or server.request_log.enabled: true",
    ),
    "update-no-prompts": (
        {"routing": CLASSIFIER,
         "learning": {"audit": AUDIT_ROUTER, "router_update": {"enabled": True}}},
        "learning.router_update.enabled", "false, or server.request_log.prompts: full or redacted",
    ),
}  # fmt: skip


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("case", sorted(BAD))
def test_config_check_refuses_what_serve_refuses(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    overrides, field, expected = BAD[case]
    path = write(tmp_path, minimal(**overrides))
    assert main(["config", "check", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith(f"config error: {path}: {field}: {expected}")
    # serve stops at the same line, before it builds anything
    assert main(["serve", "--config", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [line]


@pytest.mark.parametrize("case", sorted(BAD))
def test_the_builders_guard_says_the_same(case: str) -> None:
    """A tree built without parse_config meets the same words (the builders keep the guard)."""
    overrides, field, expected = BAD[case]
    config = GatewayConfig.model_validate(minimal(**overrides))
    with pytest.raises(ConfigError) as info:
        cross_checks(config, "gw.yaml")
    assert (info.value.file, info.value.field) == ("gw.yaml", field)
    assert info.value.expected.startswith(expected)


def test_the_valid_combinations_still_parse() -> None:
    parse_config(minimal(
        cache={"semantic": {"enabled": True, "cascade": {"static_bound": 0.8}}},
        learning={"audit": {"enabled": True, "cache": {"rate": 0.1}, "router": {"rate": 0.1}},
                  "cache_threshold": {"enabled": True},
                  "router_update": {"enabled": True}},
        routing=CLASSIFIER, server={"request_log": {"prompts": "redacted"}},
    ))  # fmt: skip
    # off, or switched off with what it needs: nothing to say
    parse_config(minimal(embedding={"backend": "static"},
                         cache={"semantic": {"cascade": {"static_bound": 0.8}}}))  # fmt: skip
    parse_config(minimal(server=NO_LOG, routing=CLASSIFIER,
                         learning={"router_update": {"enabled": False}}))  # fmt: skip
    parse_config(minimal(routing=CLASSIFIER, learning={
        "router_update": {"enabled": True, "train": False}}))  # fmt: skip


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_passes_config_check(
    example: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert len(EXAMPLES) >= 2
    assert main(["config", "check", str(example)]) == 0
    assert capsys.readouterr().out.startswith(f"{example}: ok")
