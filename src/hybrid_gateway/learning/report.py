"""What the audits say, from the records store: per cache scope the false-hit rate and its
upper 95 % Wilson bound; under the threshold, per similarity band, how often a near miss's
entry was judged worse (what a lower threshold would add); per audit stream the verdicts
(offline; `cache report`)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hybrid_gateway.learning.bound import wilson_upper
from hybrid_gateway.learning.labels import Label

__all__ = [
    "AuditSummary", "BandReport", "ScopeReport", "render_summary", "summarise", "summary_json",
]  # fmt: skip

BAND = 0.01  # the width of a near-miss similarity band


class _FalseHits:
    """The rate of ``false_hits`` in ``audits`` and its upper 95 % Wilson bound."""

    __slots__ = ()
    audits: int
    false_hits: int

    @property
    def rate(self) -> float:
        return self.false_hits / self.audits if self.audits else 0.0

    @property
    def bound(self) -> float:
        return wilson_upper(self.false_hits, self.audits)


@dataclass(frozen=True, slots=True)
class ScopeReport(_FalseHits):
    scope: str
    audits: int  # cache audits with a verdict
    false_hits: int  # a_worse: the cached answer was worse than a fresh one
    min_similarity: float | None  # of the audited hits


@dataclass(frozen=True, slots=True)
class BandReport(_FalseHits):
    """Near misses with a similarity in [low, low + BAND): entries a threshold at ``low`` would
    have served, and how many of them the judge found worse than the fresh answer."""

    low: float
    audits: int
    false_hits: int


@dataclass(frozen=True, slots=True)
class AuditSummary:
    scopes: tuple[ScopeReport, ...]
    # (kind, verdict or "none") -> count
    verdicts: dict[tuple[str, str], int]
    bands: tuple[BandReport, ...] = ()  # near misses by similarity, the highest band first


def summarise(labels: Sequence[Label]) -> AuditSummary:
    verdicts = Counter((label.kind, label.verdict or "none") for label in labels)
    by_scope: dict[str, list[Label]] = {}
    for label in labels:
        if label.kind == "cache" and label.verdict is not None:
            by_scope.setdefault(label.scope or "unknown", []).append(label)
    scopes = tuple(
        ScopeReport(
            scope, len(rows), sum(r.verdict == "a_worse" for r in rows),
            min((r.similarity for r in rows if r.similarity is not None), default=None),
        )
        for scope, rows in sorted(by_scope.items())
    )  # fmt: skip
    return AuditSummary(scopes, dict(sorted(verdicts.items())), _bands(labels))


def _bands(labels: Sequence[Label]) -> tuple[BandReport, ...]:
    counts: dict[int, list[int]] = {}
    for label in labels:
        if label.kind == "near_miss" and label.verdict is not None and label.similarity is not None:
            band = counts.setdefault(math.floor(label.similarity / BAND + 1e-9), [0, 0])
            band[0] += 1
            band[1] += label.verdict == "a_worse"
    return tuple(BandReport(round(k * BAND, 4), n, f)
                 for k, (n, f) in sorted(counts.items(), reverse=True))  # fmt: skip


def summary_json(summary: AuditSummary) -> dict[str, Any]:
    return {
        "scopes": [
            {"scope": s.scope, "audits": s.audits, "false_hits": s.false_hits,
             "false_hit_rate": s.rate, "false_hit_bound": s.bound,
             "min_similarity": s.min_similarity}
            for s in summary.scopes
        ],
        "verdicts": [{"kind": k, "verdict": v, "count": n}
                     for (k, v), n in summary.verdicts.items()],
        "near_miss_bands": [
            {"similarity_from": b.low, "similarity_to": round(b.low + BAND, 4),
             "audits": b.audits, "false_hits": b.false_hits, "false_hit_rate": b.rate,
             "false_hit_bound": b.bound}
            for b in summary.bands
        ],
    }  # fmt: skip


def render_summary(summary: AuditSummary) -> str:
    if not summary.verdicts:
        return "no audits in the window (learning.audit off, or nothing sampled yet)"
    lines = ["semantic cache, from the cache audits (bound: upper 95 % Wilson):",
             f"{'scope':<24} {'audits':>7} {'false':>6} {'rate':>7} {'bound':>7}"]  # fmt: skip
    for s in summary.scopes:
        lines.append(
            f"{s.scope:<24} {s.audits:>7} {s.false_hits:>6} {s.rate:>7.4f} {s.bound:>7.4f}"
        )
    if not summary.scopes:
        lines.append("(no cache audit with a verdict)")
    if summary.bands:
        lines.append("near misses (what a lower threshold would add), by similarity:")
        lines.append(f"{'band':<24} {'audits':>7} {'false':>6} {'rate':>7} {'bound':>7}")
        for b in summary.bands:
            band = f"[{b.low:.2f}, {b.low + BAND:.2f})"
            lines.append(f"{band:<24} {b.audits:>7} {b.false_hits:>6} {b.rate:>7.4f} "
                         f"{b.bound:>7.4f}")  # fmt: skip
    lines.append("verdicts: " + ", ".join(f"{k} {v} {n}" for (k, v), n in summary.verdicts.items()))
    return "\n".join(lines)
