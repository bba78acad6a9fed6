"""channels.NAME.endpoints / balancing / health in the config: what is accepted, and errors
that name the field."""

from __future__ import annotations

from typing import Any

import pytest

from hybrid_gateway.config import parse_config
from hybrid_gateway.config_cli import summary_lines
from hybrid_gateway.errors import ConfigError

BASE: dict[str, Any] = {"lanes": {"l": {"channel": "c"}}, "routing": {"default_lane": "l"},
                        "models": [{"id": "auto"}]}  # fmt: skip


def config(channel: dict[str, Any]) -> Any:
    return parse_config({**BASE, "channels": {"c": {"model": "m", **channel}}}, "g.yaml")


def test_endpoints_stand_in_for_base_url_and_keep_their_knobs() -> None:
    parsed = config({"endpoints": [{"url": "http://a:1/v1"}, {"url": "http://b:2/v1",
                                    "name": "gpu2", "weight": 2, "max_concurrency": 8}],
                     "balancing": {"policy": "prefix_affinity", "balance_abs": 4},
                     "health": {"active": {"path": "/v1/models"}}})  # fmt: skip
    channel = parsed.channels["c"]
    assert channel.base_url == "http://a:1/v1" and channel.endpoints[1].weight == 2
    assert channel.balancing.match_threshold == 0.3 and channel.balancing.balance_abs == 4
    assert channel.health.active.interval_s == 5.0
    assert "2 endpoints (prefix_affinity) http://a:1/v1, http://b:2/v1" in summary_lines(
        "g.yaml", parsed)[1]  # fmt: skip
    assert config({"base_url": "http://x/v1"}).channels["c"].endpoints is None


@pytest.mark.parametrize(
    ("channel", "field", "expected"),
    [
        ({"base_url": "http://x/v1", "endpoints": [{"url": "http://a/v1"}]},
         "channels.c.base_url", "either base_url or endpoints"),
        ({"endpoints": []}, "channels.c.endpoints", "at least one endpoint"),
        ({"endpoints": [{"url": "ftp://a"}]}, "channels.c.endpoints.0.url", "pattern"),
        ({"endpoints": [{"url": "http://a:1/v1"}, {"url": "http://a:1/v1"}]},
         "channels.c.endpoints.1.name", "a unique name"),
        ({"endpoints": [{"url": "http://a/v1", "weight": 0}]},
         "channels.c.endpoints.0.weight", "greater than 0"),
        ({"endpoints": [{"url": "http://a/v1"}], "balancing": {"policy": "random"}},
         "channels.c.balancing.policy", "round_robin"),
        ({"endpoints": [{"url": "http://a/v1"}], "health": {"consecutive": 3}},
         "channels.c.health.consecutive", "no such key"),
    ],
)  # fmt: skip
def test_errors_name_file_field_and_expectation(
    channel: dict[str, Any], field: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as error:
        config(channel)
    assert f"g.yaml: {field}: " in str(error.value) and expected in str(error.value)
