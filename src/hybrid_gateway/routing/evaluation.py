"""Router quality the way RouteLLM measures it (arXiv 2406.18665), on per-prompt outcomes.

A router gives each prompt a score (higher = more in need of the strong model).  Sending the
top ``k`` of ``n`` prompts to the strong model and the rest to the weak one scores

    perf(k) = (sum of weak scores + gain(k)) / n,   gain(k) = sum of (strong - weak) over the top k

so the *performance gap recovered* is ``PGR(k) = gain(k) / gain(n)``: 0 with no strong call,
1 with all.  APGR is the trapezoid area under PGR at 0 %, 10 %, ... 100 % strong calls, and
CPT(x) is the smallest share of strong calls whose PGR reaches x (exact, on the whole curve).

Ties in the score are split evenly (the expectation over random tie-breaking), so a router that
scores every prompt alike is the random router: APGR exactly 0.5.  Scores may be 0/1 or graded
(judge scores 1-10): only their differences matter.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
SHARES = np.linspace(0.0, 1.0, 11)


class NoGapError(ValueError):
    """The strong model does not score above the weak one here: there is no gap to recover."""


@dataclass(frozen=True, slots=True)
class RouterQuality:
    apgr: float
    cpt50: float  # share of strong calls (0-1) needed to recover 50 % of the gap
    cpt80: float
    n: int
    pgr: tuple[float, ...]  # PGR at 0 %, 10 %, ... 100 % strong calls

    def as_json(self) -> dict[str, object]:
        return {
            "apgr": round(self.apgr, 4),
            "cpt50": round(self.cpt50, 4),
            "cpt80": round(self.cpt80, 4),
            "n": self.n,
            "pgr": [round(p, 4) for p in self.pgr],
        }


def gain_curve(score: FloatArray, weak: FloatArray, strong: FloatArray) -> FloatArray:
    """``gain(k)`` for k = 0..n strong calls, highest scores first, ties split evenly."""
    order = np.argsort(-score, kind="stable")
    s, delta = score[order], (strong - weak)[order]
    n = len(s)
    gain = np.zeros(n + 1)
    start = 0
    while start < n:
        end = start + 1
        while end < n and s[end] == s[start]:
            end += 1
        mean_delta = float(delta[start:end].mean())
        steps = np.arange(1, end - start + 1)
        gain[start + 1 : end + 1] = gain[start] + steps * mean_delta
        start = end
    return gain


def _gain_at(gain: FloatArray, share: float) -> float:
    """Linear between whole calls: a fractional call is a coin flip."""
    k = share * (len(gain) - 1)
    lo = int(np.floor(k))
    hi = min(lo + 1, len(gain) - 1)
    return float(gain[lo] + (k - lo) * (gain[hi] - gain[lo]))


def _cpt(gain: FloatArray, target: float) -> float:
    total = gain[-1]
    reached = np.nonzero(gain >= target * total - 1e-12)[0]
    k = int(reached[0])
    if k == 0:
        return 0.0
    before, after = gain[k - 1], gain[k]
    frac = 1.0 if after == before else (target * total - before) / (after - before)
    return float((k - 1 + frac) / (len(gain) - 1))


def router_quality(score: FloatArray, weak: FloatArray, strong: FloatArray) -> RouterQuality:
    gain = gain_curve(score, weak, strong)
    total = gain[-1]
    if total <= 0:
        raise NoGapError(
            f"the strong model scores {strong.mean():.4f} on average, the weak one "
            f"{weak.mean():.4f}: no weak-to-strong gap to recover"
        )
    pgr = np.array([_gain_at(gain, share) for share in SHARES]) / total
    apgr = float(np.sum((pgr[1:] + pgr[:-1]) / 2) * (SHARES[1] - SHARES[0]))
    return RouterQuality(apgr, _cpt(gain, 0.5), _cpt(gain, 0.8), len(score), tuple(pgr))


def random_quality(
    weak: FloatArray, strong: FloatArray, *, draws: int = 20, seed: int = 0
) -> RouterQuality:
    """The mean of ``draws`` seeded random routers (each a uniform score per prompt)."""
    rng = np.random.default_rng(seed)
    runs = [router_quality(rng.random(len(weak)), weak, strong) for _ in range(draws)]
    pgr = np.mean([r.pgr for r in runs], axis=0)
    return RouterQuality(
        float(np.mean([r.apgr for r in runs])),
        float(np.mean([r.cpt50 for r in runs])),
        float(np.mean([r.cpt80 for r in runs])),
        len(weak),
        tuple(float(p) for p in pgr),
    )
