"""The dashboard's figures, computed from the same registry that ``/metrics`` renders.

Reading the metric families (not a second set of counters) is what makes the page agree with
Prometheus and Grafana: the totals are the same counters, and the percentiles use
``histogram_quantile``'s interpolation over the same buckets, so p95 on the page is what
``histogram_quantile(0.95, ...)`` gives over the gateway's lifetime.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from hybrid_gateway.dashboard.learning_view import LearningView, learning_view
from hybrid_gateway.observability.metrics import GatewayMetrics
from hybrid_gateway.observability.prom import Counter, Gauge, Histogram

# Cache outcomes that did not answer from a cache; any other value (exact, semantic, ...) did.
_NOT_A_HIT = frozenset({"miss", "bypass"})
_BREAKER_NAMES = {0: "closed", 1: "half_open", 2: "open"}


@dataclass(frozen=True, slots=True)
class LaneView:
    lane: str
    requests: int
    share: float  # of all requests
    cache_hits: int
    errors: int  # status >= 400
    p50_s: float | None  # end-to-end latency at the gateway (None before any request)
    p95_s: float | None


@dataclass(frozen=True, slots=True)
class RuleView:
    lane: str
    rule: str
    decisions: int
    share: float  # of all routing decisions


@dataclass(frozen=True, slots=True)
class BreakerView:
    channel: str
    state: str  # closed | half_open | open


@dataclass(frozen=True, slots=True)
class EndpointView:
    """One endpoint of a channel with several (upstreams/pool/)."""

    channel: str
    endpoint: str
    up: bool  # healthy; False while ejected or waiting for its probe
    in_flight: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    uptime_s: float
    requests: int
    errors: int
    cache_hits: int
    hit_rate: float | None  # cache hits / requests
    cost_usd: float
    saved_usd: float  # what the cache hits would have cost upstream
    cost_per_1k: float | None  # USD per 1,000 requests
    feedback_up: int
    feedback_down: int
    lanes: tuple[LaneView, ...]
    rules: tuple[RuleView, ...]
    breakers: tuple[BreakerView, ...]
    endpoints: tuple[EndpointView, ...] = ()
    # learning.audit and what the audits say (dashboard/learning_view.py)
    learning: LearningView | None = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def take_snapshot(metrics: GatewayMetrics, *, uptime_s: float) -> Snapshot:
    by_lane: dict[str, list[int]] = {}  # lane -> [requests, cache hits, errors]
    for labels, value in _rows(metrics.requests, ("lane", "cache", "status")):
        lane, cache, status = labels
        counts = by_lane.setdefault(lane, [0, 0, 0])
        counts[0] += int(value)
        counts[1] += int(value) if cache not in _NOT_A_HIT else 0
        counts[2] += int(value) if _is_error(status) else 0
    total = sum(c[0] for c in by_lane.values())
    hits = sum(c[1] for c in by_lane.values())
    latency = _merged_buckets(metrics.request_seconds, "lane")
    bounds = metrics.request_seconds.bounds
    lanes = tuple(
        LaneView(
            lane=lane,
            requests=counts[0],
            share=_ratio(counts[0], total) or 0.0,
            cache_hits=counts[1],
            errors=counts[2],
            p50_s=histogram_quantile(0.5, bounds, latency.get(lane, ())),
            p95_s=histogram_quantile(0.95, bounds, latency.get(lane, ())),
        )
        for lane, counts in sorted(by_lane.items(), key=lambda item: (-item[1][0], item[0]))
    )
    cost = sum(v for _, v in _rows(metrics.cost_usd, ()))
    ratings = {r: 0 for r in ("up", "down")}
    for (rating,), value in _rows(metrics.feedback, ("rating",)):
        ratings[rating] = ratings.get(rating, 0) + int(value)
    return Snapshot(
        uptime_s=uptime_s,
        requests=total,
        errors=sum(c[2] for c in by_lane.values()),
        cache_hits=hits,
        hit_rate=_ratio(hits, total),
        cost_usd=cost,
        saved_usd=sum(v for _, v in _rows(metrics.cache_saved_usd, ())),
        cost_per_1k=None if total == 0 else cost / total * 1000,
        feedback_up=ratings["up"],
        feedback_down=ratings["down"],
        lanes=lanes,
        rules=_rules(metrics.route_decisions),
        breakers=tuple(
            BreakerView(channel, _BREAKER_NAMES.get(int(level), str(level)))
            for (channel,), level in sorted(_rows(metrics.breaker_state, ("channel",)))
        ),
        endpoints=_endpoints(metrics),
        learning=learning_view(metrics.registry),
    )


def _endpoints(metrics: GatewayMetrics) -> tuple[EndpointView, ...]:
    in_flight = dict(_rows(metrics.endpoint_in_flight, ("channel", "endpoint")))
    return tuple(
        EndpointView(channel, endpoint, up == 1, int(in_flight.get((channel, endpoint), 0)))
        for (channel, endpoint), up in sorted(_rows(metrics.endpoint_up, ("channel", "endpoint")))
    )


def histogram_quantile(q: float, bounds: Sequence[float], counts: Sequence[int]) -> float | None:
    """Prometheus' ``histogram_quantile`` over one series' non-cumulative bucket counts.

    ``counts`` has one entry per bound plus the ``+Inf`` bucket.  Linear interpolation inside
    the bucket holding the rank; a rank in ``+Inf`` answers the highest finite bound, as
    Prometheus does.
    """
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    running = 0
    for i, count in enumerate(counts):
        if running + count >= rank and count > 0:
            if i == len(bounds):
                return bounds[-1]
            lower = bounds[i - 1] if i > 0 else 0.0
            return lower + (bounds[i] - lower) * (rank - running) / count
        running += count
    return bounds[-1]  # pragma: no cover - the loop always reaches the rank


def _rules(family: Counter) -> tuple[RuleView, ...]:
    rows = [(labels, int(value)) for labels, value in _rows(family, ("lane", "rule"))]
    total = sum(count for _, count in rows)
    merged: dict[tuple[str, ...], int] = {}
    for labels, count in rows:
        merged[labels] = merged.get(labels, 0) + count
    return tuple(
        RuleView(lane, rule, count, _ratio(count, total) or 0.0)
        for (lane, rule), count in sorted(merged.items(), key=lambda item: (-item[1], item[0]))
    )


def _rows(
    family: Counter | Gauge, labels: Sequence[str]
) -> Iterable[tuple[tuple[str, ...], float]]:
    """(the chosen label values, value) per series: the family may carry more labels."""
    index = [family.label_names.index(name) for name in labels]
    for key, value in family.values.items():
        yield tuple(key[i] for i in index), value


def _merged_buckets(family: Histogram, label: str) -> Mapping[str, list[int]]:
    """Bucket counts per value of ``label``, summed over the family's other labels."""
    position = family.label_names.index(label)
    merged: dict[str, list[int]] = {}
    for key, (counts, _total) in family.series.items():
        into = merged.setdefault(key[position], [0] * len(counts))
        for i, count in enumerate(counts):
            into[i] += count
    return merged


def _is_error(status: str) -> bool:
    return status.isdigit() and int(status) >= 400


def _ratio(part: float, whole: float) -> float | None:
    if whole == 0 or math.isnan(whole):
        return None
    return part / whole
