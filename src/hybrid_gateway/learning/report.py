"""What the audits say, from the records store: per cache scope the false-hit rate and its
upper 95 % Wilson bound; per audit stream the verdicts (offline; `cache report`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hybrid_gateway.learning.bound import wilson_upper
from hybrid_gateway.learning.labels import Label

__all__ = ["AuditSummary", "ScopeReport", "render_summary", "summarise", "summary_json"]


@dataclass(frozen=True, slots=True)
class ScopeReport:
    scope: str
    audits: int  # cache audits with a verdict
    false_hits: int  # a_worse: the cached answer was worse than a fresh one
    min_similarity: float | None  # of the audited hits

    @property
    def rate(self) -> float:
        return self.false_hits / self.audits if self.audits else 0.0

    @property
    def bound(self) -> float:
        return wilson_upper(self.false_hits, self.audits)


@dataclass(frozen=True, slots=True)
class AuditSummary:
    scopes: tuple[ScopeReport, ...]
    # (kind, verdict or "none") -> count
    verdicts: dict[tuple[str, str], int]


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
    return AuditSummary(scopes, dict(sorted(verdicts.items())))


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
    lines.append("verdicts: " + ", ".join(f"{k} {v} {n}" for (k, v), n in summary.verdicts.items()))
    return "\n".join(lines)
