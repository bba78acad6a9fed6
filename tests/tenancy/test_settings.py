"""The tenants, auth and limits sections: what a bad one says."""

from __future__ import annotations

from typing import Any

import pytest

from hybrid_gateway.config import parse_config
from hybrid_gateway.errors import ConfigError


def config(**sections: Any) -> dict[str, Any]:
    return {
        "channels": {"a": {"base_url": "http://127.0.0.1:1/v1", "model": "m"}},
        "lanes": {"light": {"channel": "a"}, "heavy": {"channel": "a"}},
        **sections,
    }


def error_of(data: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "gw.yaml")
    return info.value


def test_a_full_section_parses() -> None:
    parsed = parse_config(config(
        auth={"enabled": True},
        tenants={"acme": {"lanes": ["light", "heavy"],
                          "rate": {"requests_per_s": 5, "burst": 10, "tokens_per_min": 60000},
                          "budget": {"daily": 5, "monthly": 100, "on_exceed": "downgrade",
                                     "downgrade_lane": "light", "timezone": "Asia/Shanghai"}}},
        limits={"global": {"requests_per_s": 200}},
    ))  # fmt: skip
    assert parsed.limits.global_ is not None and parsed.limits.global_.requests_per_s == 200
    acme = parsed.tenants["acme"]
    assert acme.budget is not None and acme.budget.timezone == "Asia/Shanghai"


@pytest.mark.parametrize(
    ("tenant", "field", "expected"),
    [
        ({"lanes": []}, "tenants.t.lanes", "at least 1"),
        ({"lanes": ["gold"]}, "tenants.t.lanes.0", "a lane name"),
        ({"budget": {"daily": 1, "on_exceed": "downgrade", "downgrade_lane": "gold"}},
         "tenants.t.budget.downgrade_lane", "a lane name"),
        ({"lanes": ["heavy"], "budget": {"daily": 1, "on_exceed": "downgrade"}},
         "tenants.t", "must be one of the tenant's lanes"),
        ({"budget": {"on_exceed": "refuse"}}, "tenants.t.budget", "daily or monthly"),
        ({"budget": {"daily": 1, "timezone": "Mars/Olympus"}}, "tenants.t.budget.timezone",
         "IANA"),
        ({"rate": {"burst": 3}}, "tenants.t.rate", "requests_per_s"),
    ],
)  # fmt: skip
def test_bad_tenants(tenant: dict[str, Any], field: str, expected: str) -> None:
    error = error_of(config(tenants={"t": tenant}))
    assert error.field == field
    assert expected in error.expected
