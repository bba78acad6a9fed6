"""The semantic cache's hit threshold, following the cache audits (``learning.cache_threshold``).

The audits give, for each audited hit, its similarity and whether it was false (``a_worse``).
The limit is ``1 - target_precision`` on the upper 95 % Wilson bound of the false-hit rate of
the hits at or above the threshold.

- **Tighten at once.** A false hit at or above the threshold that takes the bound past the limit
  moves the threshold up, at once, to the lowest observed cut whose hits above it keep the bound
  under the limit; when no cut has the evidence for that, just above the highest false hit.
- **Loosen only with evidence.** After ``hold_s`` without a move and at least ``min_audits``
  audits since the last move, with the bound under the limit, one ``step`` down, never under
  ``min_threshold``.  A step down lets in hits the audits have not seen yet; the next false
  hit among them moves the threshold back up.

One threshold serves every cache scope (the semantic stage has one decision rule), so the
evidence is pooled; the bound of each scope is on ``/metrics``.  The policy is pure, on an
injected clock; ``ThresholdFollower`` applies its moves through the stage's
``replace_decision`` seam.  A config reload (``/admin/reload``) puts the file's threshold back;
the next move starts from it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from hybrid_gateway.learning.bound import wilson_upper
from hybrid_gateway.learning.settings import CacheThresholdConfig
from hybrid_gateway.learning.store import AuditRow
from hybrid_gateway.resilience.clock import Clock

__all__ = ["ThresholdFollower", "ThresholdMove", "ThresholdPolicy"]

log = logging.getLogger("hybrid_gateway.learning")

_ABOVE = 1e-6  # a cut just above a false hit's similarity


@dataclass(frozen=True, slots=True)
class ThresholdMove:
    old: float
    new: float
    reason: str  # tighten | loosen
    audits: int  # audited hits at or above the old threshold
    bound: float  # their false-hit bound


class ThresholdPolicy:
    def __init__(self, config: CacheThresholdConfig, threshold: float, clock: Clock) -> None:
        self._config = config
        self._clock = clock
        self.threshold = threshold
        self.limit = 1.0 - config.target_precision
        self._seen: deque[tuple[float, bool]] = deque(maxlen=config.window)
        self._since_move = 0
        self._moved_at = clock.now()

    def stats(self, cut: float | None = None) -> tuple[int, float]:
        """(audited hits at or above ``cut`` (the threshold), their false-hit bound)."""
        cut = self.threshold if cut is None else cut
        above = [false for similarity, false in self._seen if similarity >= cut]
        return len(above), wilson_upper(sum(above), len(above))

    def observe(self, similarity: float, false_hit: bool) -> ThresholdMove | None:
        self._seen.append((similarity, false_hit))
        if similarity >= self.threshold:
            self._since_move += 1
        audits, bound = self.stats()
        if false_hit and similarity >= self.threshold and bound > self.limit:
            return self._move(self._tighter(), "tighten", audits, bound)
        config = self._config
        rested = self._clock.now() - self._moved_at >= config.hold_s
        if rested and self._since_move >= config.min_audits and bound <= self.limit:
            lower = max(self.threshold - config.step, config.min_threshold)
            if lower < self.threshold:
                return self._move(lower, "loosen", audits, bound)
        return None

    def _tighter(self) -> float:
        falses = sorted({s for s, false in self._seen if false and s >= self.threshold})
        for cut in (s + _ABOVE for s in falses):
            audits, bound = self.stats(cut)
            if audits and bound <= self.limit:
                return min(cut, self._config.max_threshold)
        return min(falses[-1] + _ABOVE, self._config.max_threshold)

    def _move(self, new: float, reason: str, audits: int, bound: float) -> ThresholdMove:
        move = ThresholdMove(self.threshold, new, reason, audits, bound)
        self.threshold = new
        self._since_move = 0
        self._moved_at = self._clock.now()
        return move


class ThresholdFollower:
    """A verdict listener: cache verdicts into the policy, its moves into the cache."""

    def __init__(
        self,
        policy: ThresholdPolicy,
        apply: Callable[[float], None],
        report: Callable[[float], None] | None = None,
    ) -> None:
        self.policy = policy
        self._apply = apply
        self._report = report
        if report is not None:
            report(policy.threshold)

    def verdict(self, row: AuditRow) -> None:
        if row.kind != "cache" or row.verdict is None or row.similarity is None:
            return
        move = self.policy.observe(row.similarity, row.verdict == "a_worse")
        if move is None:
            return
        self._apply(move.new)
        if self._report is not None:
            self._report(move.new)
        log.info(
            "semantic cache threshold %s %.4f -> %.4f (%d audited hits, false-hit bound %.4f)",
            move.reason, move.old, move.new, move.audits, move.bound,
        )  # fmt: skip
