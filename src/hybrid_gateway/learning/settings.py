"""``learning.audit``: how often, how much and against what the gateway audits its decisions.

Three audit streams, each with its own sampling rate and daily spend cap per tenant:

- ``router``: a light-lane answer (a lane in ``light_lanes``) is also sent to ``heavy_lane``;
- ``cache``: a semantic-cache hit is also answered fresh, by the lane the router picks;
- ``near_miss``: a semantic-cache miss whose nearest entry only the threshold refused, at most
  ``margin`` under it: the entry's answer (what a lower threshold would have served) is judged
  against the fresh answer the client got.  No shadow request: only the judge's call.

The pair goes to the ``judge``.  Audits run in the background (at most ``max_in_flight`` at
once) and are skipped whenever the lane they need is busy or load shedding is on.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from hybrid_gateway.configbase import FieldError, Fraction, NonNegFloat, PositiveInt, Strict

__all__ = [
    "AuditConfig", "AuditStreamConfig", "CacheThresholdConfig", "JudgeConfig", "LearningConfig",
    "NearMissConfig", "RouterUpdateConfig",
]  # fmt: skip

JudgeKind = Literal["llm", "marks", "feedback"]


class AuditStreamConfig(Strict):
    # The share of eligible answers audited (0: none).
    rate: Fraction = 0.0
    # What audits of one tenant may cost per UTC day (shadow answer + judge), in USD.
    daily_usd_per_tenant: NonNegFloat = 1.0


class NearMissConfig(AuditStreamConfig):
    # How far under the hit threshold a miss's nearest entry may be and still be audited.
    margin: Annotated[float, Field(gt=0, le=1)] = 0.05


class JudgeConfig(Strict):
    kind: JudgeKind = "marks"
    # llm: the lane the rubric prompt is sent to (its channel's model judges).
    lane: str | None = None
    # llm: the judge answers one word; a few tokens leave room for a trailing full stop.
    max_tokens: Annotated[int, Field(ge=1, le=64)] = 8

    @model_validator(mode="after")
    def _lane_for_llm(self) -> JudgeConfig:
        if self.kind == "llm" and self.lane is None:
            raise FieldError("lane", "a lane name for the llm judge")
        return self


class AuditConfig(Strict):
    enabled: bool = False
    router: AuditStreamConfig = AuditStreamConfig()
    cache: AuditStreamConfig = AuditStreamConfig()
    near_miss: NearMissConfig = NearMissConfig()
    # Lanes whose answers the router stream audits, and the lane that answers them again.
    light_lanes: tuple[str, ...] = ("light",)
    heavy_lane: str = "heavy"
    judge: JudgeConfig = JudgeConfig()
    # Audits running at once in this process; one more is dropped, never queued.
    max_in_flight: PositiveInt = 4
    # Tenants whose traffic is never audited (no shadow request, no verdict row).
    exclude_tenants: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _near_miss_judged_now(self) -> AuditConfig:
        if self.near_miss.rate and self.judge.kind == "feedback":
            # a rating is of the answer the client got: the fresh one, never the entry's
            raise FieldError("near_miss.rate", "0 with the feedback judge (llm or marks judge)")
        return self

    def stream(self, kind: str) -> AuditStreamConfig:
        """The stream config of an audit kind (router, cache, near_miss)."""
        streams: dict[str, AuditStreamConfig] = {
            "router": self.router, "cache": self.cache, "near_miss": self.near_miss,
        }  # fmt: skip
        return streams[kind]


class CacheThresholdConfig(Strict):
    """The semantic cache's threshold following the cache audits (``threshold.py``)."""

    enabled: bool = False
    # The upper 95 % bound on the false-hit rate is kept under 1 - target_precision.
    target_precision: Annotated[float, Field(gt=0, lt=1)] = 0.95
    # Audits since the last move, all at or above the threshold, before one step down.
    min_audits: PositiveInt = 100
    step: Annotated[float, Field(gt=0, le=0.1)] = 0.005
    # Seconds since the last move before a step down.
    hold_s: Annotated[float, Field(gt=0)] = 600.0
    # Never below / above these (the loosening has no evidence under the floor).
    min_threshold: Annotated[float, Field(ge=-1, le=1)] = 0.9
    max_threshold: Annotated[float, Field(ge=-1, le=1)] = 1.0
    # Audited hits kept (similarity, false or not), the oldest dropped first.
    window: PositiveInt = 5000

    @model_validator(mode="after")
    def _ordered(self) -> CacheThresholdConfig:
        if self.min_threshold > self.max_threshold:
            raise FieldError("min_threshold", f"at most max_threshold ({self.max_threshold})")
        return self


class RouterUpdateConfig(Strict):
    """The router retrained on its audits, swapped in when better (``router_update.py``)."""

    enabled: bool = False
    # false: this replica only follows the live version in the records store (never trains).
    train: bool = True
    # Usable router audits (a verdict and the question stored) before a candidate is trained.
    min_labels: Annotated[int, Field(ge=20)] = 200
    # Seconds between two trainings (on the gateway's clock).
    interval_s: Annotated[float, Field(gt=0)] = 3600.0
    # The latest share of the audits kept out of the fit, for the replay.
    holdout_share: Annotated[float, Field(gt=0, lt=1)] = 0.3
    # 0: that.  2 or more: cross-fitted instead: one model per fold on the other folds, every
    # audit replayed with the scores of the model that never saw it; the candidate is their mean.
    folds: Annotated[int, Field(ge=0, le=20)] = 0
    # Seconds between two looks at the records store's live version (a rollback, a replica).
    poll_s: Annotated[float, Field(gt=0)] = 60.0
    # The pull of the candidate's weights towards the live model's.
    prior_l2: Annotated[float, Field(gt=0)] = 30.0
    # Audits older than this are not read (seconds).
    window_s: Annotated[float, Field(gt=0)] = 30 * 86400.0

    @model_validator(mode="after")
    def _folds(self) -> RouterUpdateConfig:
        if self.folds == 1:
            raise FieldError("folds", "0 (the latest holdout_share replays) or at least 2")
        return self


class LearningConfig(Strict):
    audit: AuditConfig = AuditConfig()
    cache_threshold: CacheThresholdConfig = CacheThresholdConfig()
    router_update: RouterUpdateConfig = RouterUpdateConfig()

    @model_validator(mode="after")
    def _threshold_needs_audits(self) -> LearningConfig:
        if self.cache_threshold.enabled and not (self.audit.enabled and self.audit.cache.rate):
            raise FieldError(
                "cache_threshold.enabled", "false, or audit.enabled with a cache.rate above 0"
            )
        return self

    @model_validator(mode="after")
    def _update_needs_audits(self) -> LearningConfig:
        update = self.router_update
        if update.enabled and update.train and not (self.audit.enabled and self.audit.router.rate):
            raise FieldError(
                "router_update.enabled",
                "false, or audit.enabled with a router.rate above 0 (or router_update.train: "
                "false, to follow the live version only)",
            )
        return self


def lanes_named(config: AuditConfig) -> list[tuple[str, str]]:
    """(field, lane) pairs the config's cross-reference check verifies (when enabled)."""
    if not config.enabled:
        return []
    named = [("learning.audit.heavy_lane", config.heavy_lane)]
    for i, lane in enumerate(config.light_lanes):
        named.append((f"learning.audit.light_lanes.{i}", lane))
    if config.judge.lane is not None:
        named.append(("learning.audit.judge.lane", config.judge.lane))
    return named
