"""The audit metrics, on the gateway's registry (documented in docs/metrics.md)."""

from __future__ import annotations

from hybrid_gateway.learning.bound import ScopeCounts
from hybrid_gateway.observability.prom import Counter, Gauge, Registry

__all__ = [
    "AUDITED_HITS",
    "AUDITS",
    "AUDITS_SKIPPED",
    "AUDIT_COST_USD",
    "CACHE_THRESHOLD",
    "FALSE_HITS",
    "FALSE_HIT_BOUND",
    "ROUTER_MODEL_VERSION",
    "ROUTER_UPDATES",
    "AuditMetrics",
    "RouterUpdateMetrics",
]

AUDITS = "hybrid_gateway_audits"  # counter: kind (router|cache), outcome (a verdict, or why none)
AUDITS_SKIPPED = "hybrid_gateway_audits_skipped"  # counter: kind, reason
AUDIT_COST_USD = "hybrid_gateway_audit_cost_usd"  # counter: kind
FALSE_HIT_BOUND = "hybrid_gateway_cache_false_hit_bound"  # gauge: scope
AUDITED_HITS = "hybrid_gateway_cache_audited_hits"  # gauge: scope (cache audits with a verdict)
FALSE_HITS = "hybrid_gateway_cache_false_hits"  # gauge: scope (of which a_worse)
CACHE_THRESHOLD = "hybrid_gateway_cache_threshold"  # gauge
ROUTER_MODEL_VERSION = "hybrid_gateway_router_model_version"  # gauge: 0 = the config file's
ROUTER_UPDATES = "hybrid_gateway_router_updates"  # counter: outcome


class AuditMetrics:
    def __init__(self, registry: Registry) -> None:
        self.audits = registry.add(Counter(
            AUDITS, "Audits finished, by stream and verdict (or why there is none)",
            ["kind", "outcome"],
        ))  # fmt: skip
        self.skipped = registry.add(Counter(
            AUDITS_SKIPPED, "Sampled audits not run: busy lane, shedding, cap, too many at once",
            ["kind", "reason"],
        ))  # fmt: skip
        self.cost_usd = registry.add(
            Counter(AUDIT_COST_USD, "What audits cost (shadow answers + judge), USD", ["kind"])
        )
        self.false_hit_bound = registry.add(Gauge(
            FALSE_HIT_BOUND, "Upper 95% bound on the semantic cache's false-hit rate, from audits",
            ["scope"],
        ))  # fmt: skip

        self.audited_hits = registry.add(Gauge(
            AUDITED_HITS, "Semantic cache hits audited with a verdict since start", ["scope"],
        ))  # fmt: skip
        self.false_hits = registry.add(Gauge(
            FALSE_HITS, "Audited semantic cache hits judged false (a_worse) since start",
            ["scope"],
        ))  # fmt: skip
        self.cache_threshold = registry.add(Gauge(
            CACHE_THRESHOLD, "Semantic cache hit threshold, as learning.cache_threshold moved it",
        ))  # fmt: skip

    def threshold(self, value: float) -> None:
        self.cache_threshold.set(value)

    def finished(self, kind: str, outcome: str, cost_usd: float) -> None:
        self.audits.inc((kind, outcome))
        if cost_usd > 0:
            self.cost_usd.inc((kind,), cost_usd)

    def bound(self, scope: str, counts: ScopeCounts) -> None:
        self.false_hit_bound.set(counts.bound, (scope,))
        self.audited_hits.set(counts.audits, (scope,))
        self.false_hits.set(counts.false_hits, (scope,))

    def skip(self, kind: str, reason: str) -> None:
        self.skipped.inc((kind, reason))


class RouterUpdateMetrics:
    """``learning.router_update``: the live model's version and what each attempt ended in."""

    def __init__(self, registry: Registry) -> None:
        self.version = registry.add(Gauge(
            ROUTER_MODEL_VERSION,
            "The classifier model version in use (router_models table; 0: the config's file)",
        ))  # fmt: skip
        self.updates = registry.add(Counter(
            ROUTER_UPDATES, "Router update attempts and version loads, by outcome", ["outcome"],
        ))  # fmt: skip

    def outcome(self, outcome: str) -> None:
        self.updates.inc((outcome,))
