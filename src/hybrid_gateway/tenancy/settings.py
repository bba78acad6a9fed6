"""Config sections for tenants, API-key auth, budgets and rate limits.

With ``auth.enabled: false`` (the default) every request belongs to the ``default`` tenant and
no key is needed; with it on, ``Authorization: Bearer <key>`` is required and the key (stored
hashed in ``auth.keys_path``) names the tenant and the business app it was issued for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import ConfigDict, Field, field_validator, model_validator

from hybrid_gateway.configbase import NonNegFloat, PositiveFloat, PositiveInt, Strict

DEFAULT_TENANT = "default"
DEFAULT_APP = "default"


class RateQuota(Strict):
    """A token bucket on requests and one on tokens; an omitted dimension is not limited."""

    requests_per_s: PositiveFloat | None = None
    # Requests that may arrive at once on a full bucket; defaults to max(1, requests_per_s).
    burst: PositiveInt | None = None
    # Prompt + completion tokens per minute (debited with the prompt estimate on admission,
    # corrected with the real usage when the answer is done).
    tokens_per_min: PositiveInt | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> RateQuota:
        if self.requests_per_s is None and self.tokens_per_min is None:
            raise ValueError("a quota needs requests_per_s or tokens_per_min")
        if self.burst is not None and self.requests_per_s is None:
            raise ValueError("burst needs requests_per_s")
        return self


class BudgetConfig(Strict):
    """Cost caps in the currency of the channel prices; periods turn over in ``timezone``."""

    daily: NonNegFloat | None = None
    monthly: NonNegFloat | None = None
    # At the cap: answer from the downgrade lane, or refuse (402 insufficient_quota).
    on_exceed: Literal["downgrade", "refuse"] = "refuse"
    downgrade_lane: str = "light"
    timezone: str = "UTC"

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"an IANA time zone such as UTC or Asia/Shanghai, got {value!r}"
            ) from None
        return value

    @model_validator(mode="after")
    def _not_empty(self) -> BudgetConfig:
        if self.daily is None and self.monthly is None:
            raise ValueError("a budget needs daily or monthly")
        return self


class TenantConfig(Strict):
    # Lanes this tenant may use (its tiers); None = all.  Asking for another lane's model is a
    # 403; routed traffic headed for another lane goes to the first one listed here.
    lanes: Annotated[tuple[str, ...], Field(min_length=1)] | None = None
    rate: RateQuota | None = None
    budget: BudgetConfig | None = None
    # Non-core tenants (and a core tenant's non-core apps) are the first to be answered from
    # cache only when load shedding starts.
    core: bool = True
    non_core_apps: tuple[str, ...] = ()
    # Tenants naming the same scope share cached answers; None = this tenant's own cache.
    cache_scope: str | None = None

    @model_validator(mode="after")
    def _downgrade_within_lanes(self) -> TenantConfig:
        budget = self.budget
        if (
            self.lanes is not None
            and budget is not None
            and budget.on_exceed == "downgrade"
            and budget.downgrade_lane not in self.lanes
        ):
            raise ValueError(
                f"budget.downgrade_lane {budget.downgrade_lane!r} must be one of the tenant's "
                f"lanes ({', '.join(self.lanes)})"
            )
        return self


class AuthConfig(Strict):
    enabled: bool = False
    # SQLite file of hashed API keys (relative paths: against the config file's folder).
    keys_path: str = "var/keys.sqlite3"
    # Environment variable holding the admin key; admin endpoints answer 403 when it is unset.
    admin_key_env: str | None = "HYBRID_GATEWAY_ADMIN_KEY"


class LimitsConfig(Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    # One bucket for the whole gateway, checked after the tenant's own.
    global_: RateQuota | None = Field(default=None, alias="global")


def tenant_names(tenants: Mapping[str, TenantConfig]) -> frozenset[str]:
    """The declared tenants plus the implicit ``default``."""
    return frozenset(tenants) | {DEFAULT_TENANT}
