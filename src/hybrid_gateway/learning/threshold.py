"""The semantic cache's hit threshold, following the cache audits (``learning.cache_threshold``).

The audits give, for each audited hit, its similarity and whether it was false (``a_worse``).
The limit is ``1 - target_precision`` on the upper 95 % Wilson bound of the false-hit rate of
the hits at or above the threshold.

- **Tighten at once.** A false hit at or above the threshold that takes the bound past the limit
  moves the threshold up, at once, to the lowest observed cut whose hits above it keep the bound
  under the limit; when no cut has the evidence for that, just above the highest false hit.
- **Loosen only with evidence.**  With the near-miss audits on (``learning.audit.near_miss``),
  the misses just under the threshold are audited too: what a lower threshold would have
  served, judged against the fresh answer.  After ``hold_s`` without a move, the threshold goes
  down to the lowest audited similarity ``c`` (not under ``min_threshold``) with at least
  ``min_audits`` near-miss audits between ``c`` and the threshold and a bound, over everything
  audited at or above ``c``, still under the limit.  Each audit weighs 1 / its stream's rate,
  so hits and near misses sampled at different rates stand for the traffic they came from
  (``bound.weighted_upper``).  Without near-miss audits there is no evidence under the
  threshold: after ``hold_s`` and ``min_audits`` audited hits since the last move, with the
  bound under the limit, one ``step`` down, a bet on hits nobody has audited yet; the next
  false hit among them moves the threshold back up.

One threshold serves every cache scope (the semantic stage has one decision rule), so the
evidence is pooled; the bound of each scope is on ``/metrics``.  The policy is pure, on an
injected clock; ``ThresholdFollower`` applies its moves through the stage's
``replace_decision`` seam.  A config reload (``/admin/reload``) puts the file's threshold back;
the next move starts from it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hybrid_gateway.learning.bound import upper_of_sums, weighted_upper
from hybrid_gateway.learning.settings import CacheThresholdConfig
from hybrid_gateway.learning.store import AuditRow
from hybrid_gateway.resilience.clock import Clock

__all__ = ["ThresholdFollower", "ThresholdMove", "ThresholdPolicy"]

log = logging.getLogger("hybrid_gateway.learning")

_ABOVE = 1e-6  # a cut just above a false hit's similarity
# The search for a looser cut sorts the window (up to 5,000 audits: a few ms on the event
# loop); it runs on one verdict in this many, so a busy audit stream pays it once in a while.
_TRY_EVERY = 10


@dataclass(frozen=True, slots=True)
class ThresholdMove:
    old: float
    new: float
    reason: str  # tighten | loosen
    # the audits behind it: at or above the old threshold (tighten, a blind step down) or the
    # new one (a step down on near-miss evidence), and their false-hit bound
    audits: int
    bound: float


# An audit: (similarity, false, weight = 1 / its stream's rate, near miss: under the threshold
# of its time).
_Sample = tuple[float, bool, float, bool]


class ThresholdPolicy:
    def __init__(
        self, config: CacheThresholdConfig, threshold: float, clock: Clock, explores: bool = False
    ) -> None:
        """``explores``: near-miss audits come (then a step down needs them, never blind)."""
        self._config = config
        self._clock = clock
        self._explores = explores
        self.threshold = threshold
        self.limit = 1.0 - config.target_precision
        self._seen: deque[_Sample] = deque(maxlen=config.window)
        self._since_move = 0
        self._since_try = 0  # verdicts since the last search for a looser cut
        self._moved_at = clock.now()

    def stats(self, cut: float | None = None) -> tuple[int, float]:
        """(audits at or above ``cut`` (the threshold), their false-hit bound)."""
        cut = self.threshold if cut is None else cut
        above = [(false, weight) for similarity, false, weight, _ in self._seen
                 if similarity >= cut]  # fmt: skip
        return len(above), weighted_upper(above)

    def observe(
        self, similarity: float, false_hit: bool, weight: float = 1.0, near: bool = False
    ) -> ThresholdMove | None:
        """One verdict: a served hit's (``near`` False) or a near miss's (``near`` True)."""
        self._seen.append((similarity, false_hit, weight, near))
        self._since_try += 1
        if similarity >= self.threshold:
            self._since_move += 1
        audits, bound = self.stats()
        if false_hit and similarity >= self.threshold and bound > self.limit:
            return self._move(self._tighter(), "tighten", audits, bound)
        config = self._config
        if self._clock.now() - self._moved_at < config.hold_s or bound > self.limit:
            return None
        if self._explores:  # a sorted pass over the window: at most once per _TRY_EVERY verdicts
            if self._since_try < _TRY_EVERY:
                return None
            self._since_try = 0
            return self._looser()
        if self._since_move >= config.min_audits:
            lower = max(self.threshold - config.step, config.min_threshold)
            if lower < self.threshold:
                return self._move(lower, "loosen", audits, bound)
        return None

    def _looser(self) -> ThresholdMove | None:
        """The lowest audited cut under the threshold with ``min_audits`` near misses between
        it and the threshold and the bound of everything at or above it under the limit."""
        config = self._config
        ordered = sorted(self._seen, key=lambda sample: -sample[0])
        total = squares = failed = 0.0
        band, best = 0, None
        for i, (similarity, false, weight, near) in enumerate(ordered):
            total += weight
            squares += weight * weight
            failed += weight if false else 0.0
            if similarity >= self.threshold:
                continue
            if similarity < config.min_threshold:
                break
            band += near
            if i + 1 < len(ordered) and ordered[i + 1][0] == similarity:
                continue  # a cut takes every audit at its similarity
            bound = upper_of_sums(failed, total, squares)
            if band >= config.min_audits and bound <= self.limit:
                best = (similarity, i + 1, bound)
        if best is None:
            return None
        return self._move(best[0], "loosen", best[1], best[2])

    def _tighter(self) -> float:
        falses = sorted({s for s, false, _, _ in self._seen if false and s >= self.threshold})
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
    """A verdict listener: cache and near-miss verdicts into the policy, its moves into the
    cache.  ``rates``: audit kind -> the rate its stream samples at (``cache``, ``near_miss``)."""

    def __init__(
        self,
        policy: ThresholdPolicy,
        apply: Callable[[float], None],
        report: Callable[[float], None] | None = None,
        rates: Mapping[str, float] | None = None,
    ) -> None:
        self.policy = policy
        self._apply = apply
        self._report = report
        self._weights = {kind: 1.0 / rate for kind, rate in (rates or {CACHE: 1.0}).items()
                         if kind in (CACHE, NEAR_MISS) and rate > 0}  # fmt: skip
        if report is not None:
            report(policy.threshold)

    def verdict(self, row: AuditRow) -> None:
        weight = self._weights.get(row.kind)
        if weight is None or row.verdict is None or row.similarity is None:
            return
        move = self.policy.observe(row.similarity, row.verdict == "a_worse", weight,
                                   near=row.kind == NEAR_MISS)  # fmt: skip
        if move is None:
            return
        self._apply(move.new)
        if self._report is not None:
            self._report(move.new)
        log.info(
            "semantic cache threshold %s %.4f -> %.4f (%d audits at or above it, false-hit "
            "bound %.4f)", move.reason, move.old, move.new, move.audits, move.bound,
        )  # fmt: skip


CACHE, NEAR_MISS = "cache", "near_miss"  # the audit kinds that feed the policy
