"""``learning.audit`` in the config: defaults off, lanes checked when on, errors name the field."""

from __future__ import annotations

from typing import Any

import pytest

from hybrid_gateway.config import parse_config
from hybrid_gateway.errors import ConfigError


def config(audit: dict[str, Any]) -> dict[str, Any]:
    return {
        "channels": {"c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "lanes": {"small": {"channel": "c"}, "big": {"channel": "c"}},
        "routing": {"default_lane": "small"},
        "models": [{"id": "auto"}],
        "learning": {"audit": audit},
    }


def test_off_by_default_and_lanes_unchecked_while_off() -> None:
    parsed = parse_config(config({}))
    assert parsed.learning.audit.enabled is False


@pytest.mark.parametrize(
    ("audit", "field"),
    [({"enabled": True, "light_lanes": ["small"]}, "learning.audit.heavy_lane"),
     ({"enabled": True, "heavy_lane": "big"}, "learning.audit.light_lanes.0"),
     ({"enabled": True, "heavy_lane": "big", "light_lanes": ["small"],
       "judge": {"kind": "llm", "lane": "judge"}}, "learning.audit.judge.lane"),
     ({"judge": {"kind": "llm"}}, "learning.audit.judge.lane"),
     ({"router": {"rate": 1.5}}, "learning.audit.router.rate"),
     ({"judge": {"kind": "vibes"}}, "learning.audit.judge.kind")],
)  # fmt: skip
def test_errors_name_the_field(audit: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(config(audit), "g.yaml")
    assert caught.value.field == field
