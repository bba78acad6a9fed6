"""The bench's arithmetic: per-request results joined with the workload's labels, summarised.

Pure functions over ``RequestResult`` records and ``Labels``; no I/O.

Definitions (also in benchmarks/README.md, section "bench run"):

- percentiles use **linear interpolation between closest ranks** (NumPy's default "linear"
  method): for sorted values ``v[0..n-1]`` and ``q`` in [0, 100], the rank is
  ``h = q / 100 * (n - 1)`` and the result ``v[floor(h)] + (h - floor(h)) * (v[floor(h)+1] -
  v[floor(h)])``.  One value gives that value; no values give ``None``.
- latency percentiles are over **every request** of the group (errors and client time-outs
  included: that is what a caller felt); TTFT percentiles over the group's streams that saw a
  first chunk.
- ``success``: HTTP 2xx and no error code (a stream that breaks after its headers keeps its
  200 but carries an error code, so it is a failure).
- ``quality``: a success AND the answer's mark names the item's paraphrase group AND (the mark
  says ``ok`` OR the heavy model would not have answered it well either): "at least as good
  as the heavy model would have given".
- ``cache hit``: ``x-gateway-cache`` present and not ``miss`` / ``bypass`` / ``off``.
  ``false hit``: a cache hit whose mark does not name the item's group; the rate is over hits.
- ``cost_per_1k_usd``: the sum of per-request costs (missing = 0) / requests x 1000.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.workload.schema import Labels

__all__ = [
    "NOT_HITS",
    "GroupStats",
    "Scored",
    "group_by",
    "is_cache_hit",
    "is_false_hit",
    "is_quality",
    "is_success",
    "per_request_ms",
    "percentile",
    "ratio",
    "score",
    "stage_span_s",
    "summarise",
]

NOT_HITS = frozenset({"", "miss", "bypass", "off"})


@dataclass(frozen=True, slots=True)
class Scored:
    """One request result with the labels of the item it asked (None: unknown item id)."""

    result: RequestResult
    labels: Labels | None


@dataclass(frozen=True, slots=True)
class GroupStats:
    """The figures of one group of requests (a stage, or one lane of a stage)."""

    requests: int
    qps: float | None
    latency_ms: Mapping[str, float | None]  # p50, p95, p99
    ttft_ms: Mapping[str, float | None]  # p50, p95 (streams only)
    streams: int
    successes: int
    quality_ok: int
    cache_hits: int
    false_hits: int
    cost_usd: float
    missing_cost: int  # 2xx answers without a cost figure (counted as 0)
    unknown_items: int  # results whose item id is not in the workload

    @property
    def success_rate(self) -> float | None:
        return ratio(self.successes, self.requests)

    @property
    def quality_rate(self) -> float | None:
        return ratio(self.quality_ok, self.requests)

    @property
    def cache_hit_rate(self) -> float | None:
        return ratio(self.cache_hits, self.requests)

    @property
    def false_hit_rate(self) -> float | None:
        return ratio(self.false_hits, self.cache_hits)

    @property
    def cost_per_1k_usd(self) -> float | None:
        return None if self.requests == 0 else self.cost_usd / self.requests * 1000.0


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) by linear interpolation between closest ranks."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    if not values:
        return None
    ordered = sorted(values)
    rank = q / 100.0 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (rank - low) * (ordered[high] - ordered[low])


def ratio(num: float | None, den: float | None) -> float | None:
    """``num / den``; None when either is missing or ``den`` is not positive."""
    if num is None or den is None or den <= 0:
        return None
    return num / den


def per_request_ms(seconds: float, requests: int) -> float | None:
    return None if requests <= 0 else seconds * 1000.0 / requests


def is_success(result: RequestResult) -> bool:
    """HTTP 2xx and no error after the headers (a stream that broke keeps its 200)."""
    return 200 <= result.status < 300 and result.error_code is None


def is_quality(result: RequestResult, labels: Labels | None) -> bool:
    if labels is None or not is_success(result) or result.mark_group != labels.group:
        return False
    return bool(result.mark_ok) or not labels.heavy_ok


def is_cache_hit(result: RequestResult) -> bool:
    return result.cache is not None and result.cache not in NOT_HITS


def is_false_hit(result: RequestResult, labels: Labels | None) -> bool:
    if not is_cache_hit(result):
        return False
    return labels is None or result.mark_group != labels.group


def score(results: Iterable[RequestResult], labels_by_item: Mapping[str, Labels]) -> list[Scored]:
    """Join each result with its item's labels."""
    return [Scored(r, labels_by_item.get(r.item)) for r in results]


def summarise(scored: Sequence[Scored], duration_s: float | None) -> GroupStats:
    """The figures of ``scored``; ``qps`` = requests / ``duration_s``."""
    results = [s.result for s in scored]
    ttfts = [r.ttft_ms for r in results if r.stream and r.ttft_ms is not None]
    latencies = [r.latency_ms for r in results]
    return GroupStats(
        requests=len(results),
        qps=ratio(len(results), duration_s),
        latency_ms={f"p{q}": percentile(latencies, q) for q in (50, 95, 99)},
        ttft_ms={f"p{q}": percentile(ttfts, q) for q in (50, 95)},
        streams=sum(1 for r in results if r.stream),
        successes=sum(1 for r in results if is_success(r)),
        quality_ok=sum(1 for s in scored if is_quality(s.result, s.labels)),
        cache_hits=sum(1 for r in results if is_cache_hit(r)),
        false_hits=sum(1 for s in scored if is_false_hit(s.result, s.labels)),
        cost_usd=math.fsum(r.cost_usd or 0.0 for r in results),
        missing_cost=sum(1 for r in results if is_success(r) and r.cost_usd is None),
        unknown_items=sum(1 for s in scored if s.labels is None),
    )


def group_by(scored: Iterable[Scored], key: Callable[[Scored], str]) -> dict[str, list[Scored]]:
    """``scored`` split by ``key``, groups in sorted order of their key."""
    groups: dict[str, list[Scored]] = {}
    for item in scored:
        groups.setdefault(key(item), []).append(item)
    return dict(sorted(groups.items()))


def stage_span_s(results: Iterable[RequestResult]) -> float | None:
    """Seconds from the stage's start to its last completed request (None: no requests)."""
    ends = [r.start_s + r.latency_ms / 1000.0 for r in results]
    return max(ends) if ends else None
