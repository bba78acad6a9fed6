from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hybrid_gateway.config import load_config, parse_config, read_api_key
from hybrid_gateway.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gateway.yaml"


def minimal(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "channels": {"a": {"base_url": "http://127.0.0.1:1/v1", "model": "m"}},
        "lanes": {"light": {"channel": "a"}, "heavy": {"channel": "a"}},
    }
    data.update(overrides)
    return data


def error_of(data: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "gw.yaml")
    return info.value


def test_example_config_loads() -> None:
    config = load_config(EXAMPLE)
    assert set(config.lanes) == {"light", "heavy"}
    assert [m.id for m in config.models] == ["auto", "light", "heavy"]
    assert config.routing.rules[0].name == "code-goes-heavy"


def test_defaults_fill_in() -> None:
    config = parse_config(minimal())
    assert config.server.max_body_bytes == 1024 * 1024
    assert config.cache.exact.enabled
    assert config.routing.default_lane == "heavy"


def test_unknown_key_names_the_field() -> None:
    err = error_of(minimal(chanels={}))
    assert (err.file, err.field) == ("gw.yaml", "chanels")
    assert "unknown keys are errors" in err.expected


def test_nested_unknown_key() -> None:
    data = minimal()
    data["channels"]["a"]["timeout"] = 3
    assert error_of(data).field == "channels.a.timeout"


def test_wrong_type_says_what_was_expected() -> None:
    data = minimal()
    data["channels"]["a"]["max_concurrency"] = "lots"
    err = error_of(data)
    assert err.field == "channels.a.max_concurrency"
    assert "integer" in err.expected and "'lots'" in err.expected


def test_bad_url_and_negative_numbers() -> None:
    data = minimal()
    data["channels"]["a"]["base_url"] = "localhost:8000"
    assert error_of(data).field == "channels.a.base_url"
    data = minimal()
    data["channels"]["a"]["timeout_s"] = 0
    assert "greater than 0" in error_of(data).expected


def test_missing_required_section() -> None:
    err = error_of({"channels": {}})
    assert err.field == "lanes"


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"lanes": {"light": {"channel": "zz"}, "heavy": {"channel": "a"}}}, "lanes.light.channel"),
        ({"routing": {"default_lane": "medium"}}, "routing.default_lane"),
        (
            {"routing": {"rules": [{"name": "r", "when": {"max_chars": 5}, "lane": "x"}]}},
            "routing.rules.0.lane",
        ),
        ({"models": [{"id": "auto"}, {"id": "auto"}]}, "models.1.id"),
        ({"models": [{"id": "fast", "lane": "nope"}]}, "models.0.lane"),
    ],
)
def test_cross_references_are_checked(override: dict[str, Any], field: str) -> None:
    err = error_of(minimal(**override))
    assert err.field == field
    assert "got" in err.expected


def test_rule_without_conditions_is_refused() -> None:
    err = error_of(minimal(routing={"rules": [{"name": "r", "when": {}, "lane": "light"}]}))
    assert err.field == "routing.rules.0.when"


def test_yaml_syntax_error_gives_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("channels:\n  a: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.file == str(path)
    assert info.value.field.startswith("line ")


def test_missing_file_and_non_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.yaml")
    assert "readable file" in info.value.expected
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.field == "<root>"


def test_api_key_env_must_be_set(monkeypatch: pytest.MonkeyPatch) -> None:
    data = minimal()
    data["channels"]["a"]["api_key_env"] = "HG_TEST_KEY"
    config = parse_config(data)
    monkeypatch.delenv("HG_TEST_KEY", raising=False)
    with pytest.raises(ConfigError) as info:
        read_api_key("a", config.channels["a"], "gw.yaml")
    assert info.value.field == "channels.a.api_key_env"
    assert "HG_TEST_KEY" in info.value.expected
    monkeypatch.setenv("HG_TEST_KEY", "sk-test")
    assert read_api_key("a", config.channels["a"]) == "sk-test"


def test_resilience_defaults_and_keys() -> None:
    config = parse_config(minimal())
    assert config.resilience.retry.enabled and config.resilience.breaker.enabled
    assert config.resilience.retry.backoff_s == (0.2, 0.5, 1.0)
    assert config.resilience.breaker.min_requests == 20
    custom = parse_config(minimal(resilience={
        "retry": {"backoff_s": [0.1], "budget_ratio": 0.2},
        "breaker": {"enabled": False, "half_open_probes": 3},
    }))  # fmt: skip
    assert custom.resilience.retry.backoff_s == (0.1,)
    assert not custom.resilience.breaker.enabled
    err = error_of(minimal(resilience={"breaker": {"error_rat": 0.5}}))
    assert err.field == "resilience.breaker.error_rat"


def test_lane_backup_is_cross_checked() -> None:
    data = minimal()
    data["lanes"] = {"light": {"channel": "a", "backup": "nope"}}
    assert error_of(data).field == "lanes.light.backup"
    data["lanes"] = {"light": {"channel": "a", "backup": "a"}}
    assert error_of(data).field == "lanes.light.backup"
