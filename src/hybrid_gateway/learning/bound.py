"""A live upper bound on the semantic cache's false-hit rate per cache scope, from the audits.

Each ``cache`` audit with a verdict is one Bernoulli trial: ``a_worse`` (the cached answer is
worse than a fresh one: a false hit) or not.  The bound is Wilson's score interval's upper end
at z = 1.96; with no false hit in n audits it is about 3.84 / (n + 3.84).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from hybrid_gateway.learning.store import AuditRow

__all__ = ["Z95", "FalseHitTracker", "ScopeCounts", "wilson_upper"]

Z95 = 1.96


def wilson_upper(failures: int, trials: int, z: float = Z95) -> float:
    """Upper end of the Wilson score interval for ``failures / trials`` (1.0 with no trials)."""
    if trials <= 0:
        return 1.0
    p = failures / trials
    z2 = z * z
    centre = p + z2 / (2 * trials)
    spread = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials))
    return min(1.0, (centre + spread) / (1 + z2 / trials))


@dataclass(slots=True)
class ScopeCounts:
    audits: int = 0
    false_hits: int = 0

    @property
    def bound(self) -> float:
        return wilson_upper(self.false_hits, self.audits)


class FalseHitTracker:
    """A ``VerdictListener``: counts cache verdicts per scope and reports each new bound."""

    def __init__(self, report: Callable[[str, ScopeCounts], None] | None = None) -> None:
        self.scopes: dict[str, ScopeCounts] = {}
        self._report = report

    def verdict(self, row: AuditRow) -> None:
        if row.kind != "cache" or row.verdict is None or row.scope is None:
            return
        counts = self.scopes.setdefault(row.scope, ScopeCounts())
        counts.audits += 1
        counts.false_hits += row.verdict == "a_worse"
        if self._report is not None:
            self._report(row.scope, counts)
