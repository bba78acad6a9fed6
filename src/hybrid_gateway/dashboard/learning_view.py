"""The dashboard's "learning from traffic" panel: the audits and what they say (issue 23).

Read from the registry's audit families by name (``learning/metrics.py``), as ``/metrics``
renders them: the audits per stream and verdict, their cost, the false-hit bound per cache
scope with its trials, the learned cache threshold and the router model version in use.
"""

from __future__ import annotations

from dataclasses import dataclass

from hybrid_gateway.learning import metrics as names
from hybrid_gateway.observability.prom import Counter, Gauge, Histogram, Registry

__all__ = ["AuditCount", "LearningView", "ScopeBound", "learning_view"]


@dataclass(frozen=True, slots=True)
class AuditCount:
    kind: str  # router | cache | near_miss
    outcome: str  # a verdict, or why there is none
    audits: int


@dataclass(frozen=True, slots=True)
class ScopeBound:
    scope: str
    audited_hits: int
    false_hits: int
    bound: float  # upper 95 % Wilson bound on the false-hit rate


@dataclass(frozen=True, slots=True)
class LearningView:
    audits: tuple[AuditCount, ...]
    skipped: int
    cost_usd: float
    scopes: tuple[ScopeBound, ...]
    cache_threshold: float | None  # learning.cache_threshold (None: off)
    router_model_version: int | None  # learning.router_update (None: off)


def _family(registry: Registry, name: str) -> Counter | Gauge | Histogram | None:
    return next((f for f in registry.families if f.name == name), None)


def _values(registry: Registry, name: str) -> dict[tuple[str, ...], float]:
    family = _family(registry, name)
    return dict(family.values) if isinstance(family, Counter | Gauge) else {}


def learning_view(registry: Registry) -> LearningView | None:
    """None when the gateway has no audit metrics (nothing of issue 23 registered)."""
    if _family(registry, names.AUDITS) is None:
        return None
    audits = tuple(
        AuditCount(kind, outcome, int(n))
        for (kind, outcome), n in sorted(_values(registry, names.AUDITS).items())
    )
    bounds = _values(registry, names.FALSE_HIT_BOUND)
    trials = _values(registry, names.AUDITED_HITS)
    falses = _values(registry, names.FALSE_HITS)
    scopes = tuple(
        ScopeBound(scope, int(trials.get((scope,), 0)), int(falses.get((scope,), 0)), bound)
        for (scope,), bound in sorted(bounds.items())
    )
    threshold = _values(registry, names.CACHE_THRESHOLD).get(())
    version = _values(registry, names.ROUTER_MODEL_VERSION).get(())
    return LearningView(
        audits=audits,
        skipped=int(sum(_values(registry, names.AUDITS_SKIPPED).values())),
        cost_usd=sum(_values(registry, names.AUDIT_COST_USD).values()),
        scopes=scopes,
        cache_threshold=threshold,
        router_model_version=None if version is None else int(version),
    )
