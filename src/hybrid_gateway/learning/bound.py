"""A live upper bound on the semantic cache's false-hit rate per cache scope, from the audits.

Each ``cache`` audit with a verdict is one Bernoulli trial: ``a_worse`` (the cached answer is
worse than a fresh one: a false hit) or not.  The bound is Wilson's score interval's upper end
at z = 1.96; with no false hit in n audits it is about 3.84 / (n + 3.84).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from hybrid_gateway.learning.store import AuditRow

__all__ = [
    "Z95", "FalseHitTracker", "ScopeCounts", "upper_of_sums", "weighted_upper", "wilson_upper",
]  # fmt: skip

Z95 = 1.96


def wilson_upper(failures: int, trials: int, z: float = Z95) -> float:
    """Upper end of the Wilson score interval for ``failures / trials`` (1.0 with no trials)."""
    if trials <= 0:
        return 1.0
    return _wilson(failures / trials, trials, z)


def weighted_upper(samples: Iterable[tuple[bool, float]], z: float = Z95) -> float:
    """Wilson's upper end for weighted trials ``(failed, weight)``: the weighted failure rate
    over Kish's effective number of trials, ``(sum w)^2 / sum w^2`` (the plain bound when every
    weight is equal).  A weight is 1 / the rate its trial was sampled at, so trials drawn at
    different rates stand for the requests they were drawn from."""
    total = squares = failed = 0.0
    for failure, weight in samples:
        total += weight
        squares += weight * weight
        failed += weight if failure else 0.0
    return upper_of_sums(failed, total, squares, z)


def upper_of_sums(failed: float, total: float, squares: float, z: float = Z95) -> float:
    """``weighted_upper`` from the sums of the failed trials' weights, of all the weights and of
    their squares (for a caller that accumulates them as it goes)."""
    if total <= 0:
        return 1.0
    return _wilson(failed / total, total * total / squares, z)


def _wilson(p: float, n: float, z: float) -> float:
    z2 = z * z
    centre = p + z2 / (2 * n)
    spread = z * math.sqrt(max(p * (1 - p), 0.0) / n + z2 / (4 * n * n))
    return min(1.0, (centre + spread) / (1 + z2 / n))


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
