"""The Project X requirements table (REQUIREMENTS.md section 5) as a verdict, per strategy x stage.

Pure functions over a stage's figures; no I/O.  ``figures_of`` reads them from a stage object of
the report (``report.stage_json`` plus its ``project_x`` counts), ``verdict`` compares them with
the targets: each line is passed, failed, or ``None`` (no figure, or a line that has no target and
is reported only).  ``ISSUE_GOALS`` are the stricter goals of issue 21 for the ``full``
strategy (default workload, 100 concurrency, open loop, the ``article`` emulator profile).

Definitions:

- ``simple_share``: requests answered without the heavy model (a cache hit, or the light lane)
  / requests.  Project X expects 80 %.
- ``simple_p95_s`` / ``complex_p95_s``: end-to-end p95 over the items labelled simple / complex
  (errors included).
- ``cost_reduction``: 1 - relative cost (cost per 1k against heavy-only's at the same stage).
- ``cache_hit_rate``: hits / requests; ``exact`` and ``semantic`` hits are reported apart.
- ``availability``: the success rate (HTTP 2xx, no error after the headers).
- ``quality``, by class: ``bench run``'s quality (at least as good as the heavy model's answer).
- ``false_hit_rate``: hits that answered another question / hits.
- ``fallbacks`` (answers marked ``x-gateway-fallback``, by kind) and ``late`` deliveries (the
  slow lane's answers finished after a deadline fallback): counts, reported only.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ISSUE_GOALS",
    "PROJECT_X",
    "StageFigures",
    "Target",
    "VerdictLine",
    "figures_of",
    "round_figure",
    "show",
    "verdict",
    "verdict_json",
]

_COMPARE: Mapping[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


@dataclass(frozen=True, slots=True)
class Target:
    """One requirement: ``figure op bound``; ``bound`` None: reported only, never judged."""

    key: str  # a field of StageFigures
    label: str
    op: str = ">="
    bound: float | None = None
    unit: str = "%"  # how the bound and the value print: "%" (a fraction) or "s"

    def value_of(self, figures: StageFigures) -> float | None:
        """This line's figure in ``figures`` (None: no figure)."""
        value = getattr(figures, self.key)
        return None if value is None else float(value)

    def judge(self, value: float | None) -> bool | None:
        if self.bound is None or value is None:
            return None
        return _COMPARE[self.op](value, self.bound)

    def target_text(self) -> str:
        if self.bound is None:
            return "reported"
        shown = f"{self.bound:g} s" if self.unit == "s" else f"{self.bound * 100:g} %"
        return f"{self.op} {shown}"


@dataclass(frozen=True, slots=True)
class StageFigures:
    """What the verdict reads from one strategy x stage (fractions 0..1, seconds)."""

    requests: int
    simple_share: float | None
    p95_s: float | None
    simple_p95_s: float | None
    complex_p95_s: float | None
    relative_cost: float | None
    cache_hit_rate: float | None
    exact_hit_rate: float | None
    semantic_hit_rate: float | None
    availability: float | None
    quality: float | None
    simple_quality: float | None
    complex_quality: float | None
    false_hit_rate: float | None
    fallbacks: Mapping[str, int] = field(default_factory=dict)
    late_deliveries: int = 0

    @property
    def cost_reduction(self) -> float | None:
        return None if self.relative_cost is None else 1.0 - self.relative_cost

    @property
    def fallback_total(self) -> float:
        return float(sum(self.fallbacks.values()))

    @property
    def late_total(self) -> float:
        return float(self.late_deliveries)


@dataclass(frozen=True, slots=True)
class VerdictLine:
    key: str
    label: str
    value: float | None
    target: str
    passed: bool | None  # None: no figure, or reported only
    unit: str

    @property
    def shown(self) -> str:
        return show(self.value, self.unit)


PROJECT_X: tuple[Target, ...] = (
    Target("simple_share", "simple request share", ">=", 0.80),
    Target("simple_p95_s", "simple p95", "<", 1.0, "s"),
    Target("complex_p95_s", "complex p95", "<", 5.0, "s"),
    Target("cost_reduction", "inference cost reduction", ">", 0.40),
    Target("cache_hit_rate", "cache hit rate", ">", 0.30),
    Target("exact_hit_rate", "  of which exact"),
    Target("semantic_hit_rate", "  of which semantic"),
    Target("availability", "availability", ">", 0.995),
    Target("simple_quality", "quality, simple items"),
    Target("complex_quality", "quality, complex items"),
    Target("false_hit_rate", "false hits (of hits)"),
    Target("fallback_total", "fallback answers", unit="n"),
    Target("late_total", "late deliveries", unit="n"),
)

# Issue 21's goal for `full` (default workload, 100 concurrency, open loop, `article` profile).
ISSUE_GOALS: tuple[Target, ...] = (
    Target("relative_cost", "relative cost", "<=", 0.35),
    Target("p95_s", "p95", "<=", 1.5, "s"),
    Target("quality", "quality", ">=", 0.99),
    Target("availability", "success", ">=", 0.995),
    Target("false_hit_rate", "false hits", "<=", 0.01),
)


def verdict(figures: StageFigures, targets: Sequence[Target] = PROJECT_X) -> list[VerdictLine]:
    """One line per target: the figure, the target as text, and pass / fail / None."""
    lines = []
    for target in targets:
        value = target.value_of(figures)
        lines.append(
            VerdictLine(
                target.key, target.label, value, target.target_text(), target.judge(value),
                target.unit,
            )
        )  # fmt: skip
    return lines


def verdict_json(lines: Sequence[VerdictLine]) -> list[dict[str, Any]]:
    return [
        {"key": ln.key, "label": ln.label.strip(), "value": round_figure(ln.value),
         "shown": ln.shown, "target": ln.target, "pass": ln.passed}
        for ln in lines
    ]  # fmt: skip


def figures_of(stage: Mapping[str, Any]) -> StageFigures:
    """The verdict's figures from one ``results[i]`` object of a ``bench run`` report."""
    px = stage.get("project_x_counts", {})
    requests = int(stage["requests"])
    by_class = stage.get("complexity", {})
    hits = px.get("hits_by_kind", {})
    return StageFigures(
        requests=requests,
        simple_share=_share(px.get("served_without_heavy"), requests),
        p95_s=_seconds(stage["latency_ms"]["p95"]),
        simple_p95_s=_seconds(_class(by_class, "simple", "p95")),
        complex_p95_s=_seconds(_class(by_class, "complex", "p95")),
        relative_cost=stage.get("relative_cost"),
        cache_hit_rate=stage.get("cache_hit_rate"),
        exact_hit_rate=_share(hits.get("exact", 0), requests),
        semantic_hit_rate=_share(hits.get("semantic", 0), requests),
        availability=stage.get("success_rate"),
        quality=stage.get("quality_rate"),
        simple_quality=by_class.get("simple", {}).get("quality_rate"),
        complex_quality=by_class.get("complex", {}).get("quality_rate"),
        false_hit_rate=stage.get("false_hit_rate"),
        fallbacks=dict(px.get("fallbacks", {})),
        late_deliveries=int(px.get("late_deliveries", 0)),
    )


def _class(by_class: Mapping[str, Any], name: str, q: str) -> float | None:
    group = by_class.get(name)
    return None if group is None else group["latency_ms"][q]


def _share(count: float | None, requests: int) -> float | None:
    return None if count is None or requests <= 0 else count / requests


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


def round_figure(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def show(value: float | None, unit: str) -> str:
    """A figure as the tables print it: seconds, a count, or a percentage (a fraction)."""
    if value is None:
        return "n/a"
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "n":
        return f"{value:.0f}"
    return f"{value:.1%}"
