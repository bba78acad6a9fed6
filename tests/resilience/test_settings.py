"""The degradation config keys: parsed strictly, cross-checked, errors name the field."""

from __future__ import annotations

from typing import Any

import pytest

from hybrid_gateway.config import parse_config
from hybrid_gateway.errors import ConfigError


def config(**lanes: dict[str, Any]) -> dict[str, Any]:
    base: dict[str, Any] = {
        "channels": {
            "a": {"base_url": "http://127.0.0.1:1/v1", "model": "m", "max_concurrency": 8},
            "b": {"base_url": "http://127.0.0.1:2/v1", "model": "m", "max_concurrency": 8},
        },
        "lanes": {"light": {"channel": "a"}, "heavy": {"channel": "b"}},
    }
    base["lanes"] |= lanes
    return base


def field_of(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "g.yaml")
    return info.value.field


def test_a_full_degradation_config_parses() -> None:
    data = config(
        heavy={"channel": "b", "backup": "a", "retry_on_backup": True, "deadline_s": 8,
               "fallback_lane": "light", "queue": {"max_concurrency": 4, "max_waiting": 16}},
        light={"channel": "a", "queue": {"max_concurrency": 4, "timeout_s": 2}},
    )  # fmt: skip
    data["resilience"] = {
        "deferred": {"ttl_s": 600, "webhook": {"url": "https://hooks.example.com/late"}},
        "shedding": {"enabled": True, "error_rate": 0.3, "simpler_model": "light", "status": 503},
    }
    parsed = parse_config(data)
    heavy = parsed.lanes["heavy"]
    assert heavy.deadline_s == 8 and heavy.queue is not None and heavy.queue.max_waiting == 16
    assert parsed.resilience.shedding.status == 503


@pytest.mark.parametrize(
    ("lanes", "field"),
    [
        ({"heavy": {"channel": "b", "deadline_s": 8}}, "lanes.heavy.fallback_lane"),
        ({"heavy": {"channel": "b", "deadline_s": 8, "fallback_lane": "nope"}},
         "lanes.heavy.fallback_lane"),
        ({"heavy": {"channel": "b", "deadline_s": 8, "fallback_lane": "heavy"}},
         "lanes.heavy.fallback_lane"),
        ({"heavy": {"channel": "b", "retry_on_backup": True}}, "lanes.heavy.retry_on_backup"),
        # both lanes' shares on channel a (light's own, heavy's backup) exceed its 8 slots
        ({"light": {"channel": "a", "queue": {"max_concurrency": 6}},
          "heavy": {"channel": "b", "backup": "a", "queue": {"max_concurrency": 4}}},
         "channels.a.max_concurrency"),
    ],
)  # fmt: skip
def test_bad_lane_settings_name_their_field(lanes: dict[str, Any], field: str) -> None:
    assert field_of(config(**lanes)) == field


def test_shedding_checks_its_model_and_hysteresis() -> None:
    data = config()
    data["resilience"] = {"shedding": {"simpler_model": "tiny"}}
    assert field_of(data) == "resilience.shedding.simpler_model"
    data["resilience"] = {"shedding": {"error_rate": 0.1, "recover_rate": 0.2}}
    assert field_of(data).startswith("resilience.shedding")


def test_a_webhook_url_must_be_http() -> None:
    data = config()
    data["resilience"] = {"deferred": {"webhook": {"url": "file:///etc/passwd"}}}
    assert field_of(data) == "resilience.deferred.webhook.url"
