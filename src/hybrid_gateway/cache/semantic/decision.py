"""The hit decision: is the nearest stored question really the same question?

    nearest neighbour (cosine, in the request's partition)
      -> score >= threshold         calibrated on labelled pairs for a target precision
      -> every enabled guard passes numbers, dates, negation, entities (``guards.py``)
      -> verifier score >= its own  optional learned pair verifier (``verifier.py``): reads
         threshold                  both questions and both vectors, calibrated the same way
      -> reranker score >= its min  optional (``rerank.py``), applied by the cache stage

The threshold is never a hand-picked constant: ``hybrid-gateway cache calibrate`` chooses it
(and the guards) on labelled pairs so that the false-hit rate is bounded, and writes it into
the config.  ``Verdict`` records the score and which checks passed or failed; the pipeline puts
them on the request record, so every hit says why it was one.
"""

from __future__ import annotations

from dataclasses import dataclass

from hybrid_gateway.cache.semantic import guards
from hybrid_gateway.cache.semantic.verifier import PairVerifier
from hybrid_gateway.embedding.base import Vector


@dataclass(frozen=True, slots=True)
class Verdict:
    hit: bool
    similarity: float
    passed: tuple[str, ...]
    failed: tuple[str, ...]

    def checks(self) -> dict[str, object]:
        """What the request log and headers show about this decision."""
        return {"similarity": round(self.similarity, 4), "passed": list(self.passed),
                "failed": list(self.failed)}  # fmt: skip


@dataclass(frozen=True, slots=True)
class VerifierCheck:
    model: PairVerifier
    threshold: float  # calibrated on labelled pairs by `cache calibrate --verifier`


@dataclass(frozen=True, slots=True)
class DecisionRule:
    threshold: float
    guards: tuple[str, ...] = guards.GUARD_NAMES
    verifier: VerifierCheck | None = None

    def judge(
        self,
        question: str,
        candidate: str,
        similarity: float,
        vectors: tuple[Vector, Vector] | None = None,
    ) -> Verdict:
        """``vectors`` (question's, candidate's) are needed only with a verifier."""
        if similarity < self.threshold:
            return Verdict(False, similarity, (), ("threshold",))
        result = guards.check(question, candidate, self.guards)
        passed, failed = ("threshold", *result.passed), result.failed
        if self.verifier is not None and not failed:
            # without the vectors the verifier cannot judge: that is a "no", never a hit
            ok = vectors is not None and self.verifier.model.score(
                question, candidate, *vectors) >= self.verifier.threshold  # fmt: skip
            if ok:
                passed = (*passed, "verifier")
            else:
                failed = ("verifier",)
        return Verdict(not failed, similarity, passed, failed)

    def score(self, question: str, candidate: str, similarity: float) -> float:
        """The decision as a number for curves and AUC: the cosine, or -inf when vetoed."""
        return similarity if guards.check(question, candidate, self.guards).ok else float("-inf")
