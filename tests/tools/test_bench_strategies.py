"""The strategies build valid gateway configs from the example config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hybrid_gateway.config import load_config, parse_config
from hybrid_gateway.tools.bench.runner import lane_profiles, widened_channels
from hybrid_gateway.tools.bench.strategies import (
    FULL_CONFIG,
    STRATEGIES,
    STRATEGY_NOTES,
    channel_of_lane,
)
from hybrid_gateway.tools.processes import python_module_argv, start_process, stop_process

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
    # prices come from the base config; channel settings too, but for the full-* strategies
    assert config.channels["heavy-local"].price_per_1m_output == 3.0
    assert config.channels["light-local"].max_concurrency == (128 if "full" in name else 64)
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


FULL_EXAMPLE = EXAMPLE.with_name("gateway-full.yaml")


def test_the_full_example_is_the_packaged_one() -> None:
    assert FULL_CONFIG.read_bytes() == FULL_EXAMPLE.read_bytes()
    config = load_config(FULL_EXAMPLE)
    assert config.routing.classifier is not None and config.routing.gates is not None
    assert config.cache.exact.enabled and config.cache.semantic.enabled
    heavy = config.lanes["heavy"]
    assert heavy.backup and heavy.retry_on_backup and heavy.deadline_s and heavy.queue
    assert config.lanes["light"].queue is not None
    assert config.resilience.retry.enabled and config.resilience.breaker.enabled
    assert config.resilience.shedding.enabled
    # every capability a later issue added is on in the whole-system config
    for name in ("light-local", "heavy-local"):
        channel = config.channels[name]
        assert channel.endpoints and channel.health.active is not None
        assert channel.profile == "auto" and channel.context_tokens
    assert config.channels["heavy-local"].balancing.policy == "prefix_affinity"
    assert config.resilience.breaker.min_distinct_callers >= 2
    assert config.cache.semantic.write_behind
    assert config.learning.audit.enabled and config.learning.cache_threshold.enabled
    assert config.learning.audit.router.rate > 0 and config.learning.audit.cache.rate > 0
    assert config.learning.router_update.enabled and config.server.request_log.prompts != "none"
    assert config.server.log.level == "INFO"


def test_full_runs_the_example_on_the_bench_upstreams(base: dict[str, Any], tmp_path: Path) -> None:
    base["channels"]["heavy-local"]["price_per_1m_output"] = 7.0
    config = parse_config(STRATEGIES["full"](base, UPSTREAMS, tmp_path / "log.sqlite3"))
    # the backup answers from the heavy emulator too, priced as the base's heavy channel
    assert config.channels["heavy-backup"].base_url == UPSTREAMS["heavy"]
    assert config.channels["heavy-backup"].price_per_1m_output == 7.0
    assert config.channels["heavy-local"].price_per_1m_output == 7.0
    assert config.cache.semantic.path == str(tmp_path / "semantic-cache.sqlite3")
    example = load_config(FULL_EXAMPLE)
    # a pool keeps its policy and health with the one bench emulator as its endpoint
    heavy = config.channels["heavy-local"]
    assert heavy.endpoints is not None and [e.url for e in heavy.endpoints] == [UPSTREAMS["heavy"]]
    assert heavy.balancing == example.channels["heavy-local"].balancing
    assert heavy.health == example.channels["heavy-local"].health
    # the emulator cannot judge two answers: its quality marks do
    assert example.learning.audit.judge.kind == "llm"
    assert config.learning.audit.judge.kind == "marks"
    assert config.routing.classifier == example.routing.classifier
    assert config.cache.semantic.threshold == example.cache.semantic.threshold


@pytest.mark.parametrize(
    ("name", "removed"),
    [
        ("full-no-classifier", "classifier"),
        ("full-no-semantic", "semantic"),
        ("full-no-degrade", "degrade"),
    ],
)
def test_each_ablation_removes_one_part(
    name: str, removed: str, base: dict[str, Any], tmp_path: Path
) -> None:
    config = parse_config(STRATEGIES[name](base, UPSTREAMS, tmp_path / "l"))
    heavy = config.lanes["heavy"]
    parts = {
        "classifier": config.routing.classifier is not None,
        "semantic": config.cache.semantic.enabled,
        "degrade": heavy.deadline_s is not None and heavy.backup is not None
        and config.resilience.retry.enabled and config.resilience.breaker.enabled
        and config.resilience.shedding.enabled,
    }  # fmt: skip
    assert {part for part, on in parts.items() if not on} == {removed}
    assert config.cache.exact.enabled and heavy.queue is not None  # kept in every ablation
    # what needs the classifier is off with it (learning/build_update.py refuses it at start)
    assert config.routing.classifier is not None or not config.learning.router_update.enabled
    handed_on = [r.name for r in config.routing.rules if r.action == "classifier"]
    assert handed_on == ([] if removed == "classifier" else ["calculation-to-classifier"])


@pytest.mark.parametrize("name", ["heavy-only", "hybrid", "hybrid-cache"])
def test_the_article_baselines_have_no_degradation(
    name: str, base: dict[str, Any], tmp_path: Path
) -> None:
    config = parse_config(STRATEGIES[name](base, UPSTREAMS, tmp_path / "l"))
    assert not config.resilience.retry.enabled and not config.resilience.breaker.enabled
    assert all(lane.deadline_s is None and lane.backup is None for lane in config.lanes.values())


def test_the_article_profile_widens_the_base_channels(base: dict[str, Any]) -> None:
    base["channels"]["light-local"]["max_concurrency"] = 300
    wide = widened_channels(base, lane_profiles("article"))
    assert wide["channels"]["heavy-local"]["max_concurrency"] == 128  # was 32: the server's slots
    assert wide["channels"]["light-local"]["max_concurrency"] == 300  # never lowered
    assert base["channels"]["heavy-local"]["max_concurrency"] == 32  # the base is not modified
    assert lane_profiles("default") == {"light": "light", "heavy": "heavy"}
    parse_config(wide)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_starts_a_gateway(name: str, base: dict[str, Any], tmp_path: Path) -> None:
    # What only a starting gateway checks (learning.router_update needs the classifier,
    # learning.cache_threshold the semantic cache, ...): a bench run broke on both once.
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(STRATEGIES[name](base, UPSTREAMS, tmp_path / "log.sqlite3")))
    argv = python_module_argv("hybrid_gateway.cli", "serve", "--config", str(path))
    process = start_process(f"gateway-{name}", argv, tmp_path / "logs", timeout_s=60)
    stop_process(process)
