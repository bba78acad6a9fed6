"""The strategies build valid gateway configs from the example config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hybrid_gateway.config import parse_config
from hybrid_gateway.tools.bench.strategies import STRATEGIES, STRATEGY_NOTES, channel_of_lane

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gateway.yaml"
UPSTREAMS = {"light": "http://127.0.0.1:1111/v1", "heavy": "http://127.0.0.1:2222/v1"}


@pytest.fixture
def base() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return data


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_is_a_valid_loopback_config(
    name: str, base: dict[str, Any], tmp_path: Path
) -> None:
    before = yaml.safe_dump(base)
    config = parse_config(STRATEGIES[name](base, UPSTREAMS, tmp_path / "log.sqlite3"))
    assert yaml.safe_dump(base) == before, "the base config is not modified"
    assert (config.server.host, config.server.port) == ("127.0.0.1", 0)
    assert config.server.request_log.path == str(tmp_path / "log.sqlite3")
    assert config.channels["light-local"].base_url == UPSTREAMS["light"]
    assert config.channels["heavy-local"].base_url == UPSTREAMS["heavy"]
    # prices and channel settings come from the base config
    assert config.channels["heavy-local"].price_per_1m_output == 3.0
    assert config.channels["light-local"].max_concurrency == 64
    assert name in STRATEGY_NOTES


def test_heavy_only(base: dict[str, Any], tmp_path: Path) -> None:
    config = parse_config(STRATEGIES["heavy-only"](base, UPSTREAMS, tmp_path / "l"))
    assert config.routing.rules == ()
    assert config.routing.default_lane == "heavy"
    assert not config.cache.exact.enabled


def test_hybrid_keeps_rules_without_cache(base: dict[str, Any], tmp_path: Path) -> None:
    config = parse_config(STRATEGIES["hybrid"](base, UPSTREAMS, tmp_path / "l"))
    assert [r.name for r in config.routing.rules] == [r["name"] for r in base["routing"]["rules"]]
    assert not config.cache.exact.enabled


def test_hybrid_cache_turns_the_exact_cache_on(base: dict[str, Any], tmp_path: Path) -> None:
    base["cache"]["exact"]["enabled"] = False
    config = parse_config(STRATEGIES["hybrid-cache"](base, UPSTREAMS, tmp_path / "l"))
    assert config.cache.exact.enabled
    assert config.cache.exact.ttl_s == 3600
    assert len(config.routing.rules) == len(base["routing"]["rules"])


def test_channel_of_lane(base: dict[str, Any]) -> None:
    assert channel_of_lane(base, "light")["model"] == "light-7b-int8"
    with pytest.raises(KeyError):
        channel_of_lane(base, "medium")
