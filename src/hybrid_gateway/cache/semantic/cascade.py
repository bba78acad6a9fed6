"""The semantic cache's static-then-e5 cascade (``cache.semantic.cascade``, off by default).

The bundled e5 embedder costs ~30 ms of CPU for a short question and ~1 s for a 2,000-character
prompt; every unique question paid it twice over (lookup, then store).  With the cascade the
cache *indexes* its entries by the static embedder's vectors (``embedding/static.py``, tens of
microseconds a question once its tokens are known), and e5 is asked only when a hit is
plausible:

    static vector of the question -> nearest stored question (static cosine)
      -> static cosine >= static_bound   else a certain miss: e5 never runs (``!static_bound``)
      -> the guards (text only)          as without the cascade
      -> e5 cosine of the two questions  both embedded by the gateway's e5 embedder (the
         >= threshold                    question's vector is the request's, shared with the
                                         router; the candidate's is e5's recent-text reuse)
      -> the reranker, if any            as without the cascade

The cache's rule is a ``CascadeRule``: its ``threshold`` is still e5's calibrated one (what
``/admin/cache/stats``, a reload and the learned threshold read and move), while its
``judge`` cuts the static cosine at the bound.  The hit decision is e5's: precision cannot
drop, and recall loses only the true hits whose static cosine falls under the bound (the bound is
chosen on labelled pairs for that: benchmarks/experiments/static_embedder_cascade.py).  A miss
is stored with its static vector alone; no e5 vector is ever stored.  The nearest candidate is
the static index's, which is not always e5's nearest: a lookup may check a different entry than
e5 alone would have.

When e5 cannot answer the confirmation, the request does not wait and does not fail: queue full
``embedder_busy``, slower than ``confirm_timeout_ms`` ``embedder_slow``, an error
``embedder_error``; each is a bypass (``x-gateway-cache: bypass``), the answer still goes
upstream and is stored under its static vector.  ``embedder_slow`` is also decided *before*
any work starts when the embedder predicts a longer wait (``BatchingEmbedder.expected_ms``:
the tokens queued and the texts' own at its measured rate): a 2,000-character prompt, or a
queue backed up behind one, would only burn CPU for a confirmation that comes too late.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from hybrid_gateway.cache.semantic.decision import DecisionRule, Verdict
from hybrid_gateway.embedding.base import AsyncEmbedder, Vector
from hybrid_gateway.embedding.lazy import LazyEmbedding

STATIC_BOUND = "static_bound"  # the failed check of a certain miss
E5_CHECK = "e5"  # the passed or failed check of e5's confirmation
EMBEDDER_SLOW = "embedder_slow"
EMBEDDER_ERROR = "embedder_error"


@dataclass(frozen=True, slots=True)
class CascadeStep:
    static: AsyncEmbedder  # the index's embedder
    static_bound: float  # static cosine under which a candidate is a certain miss
    timeout_s: float | None = None  # for e5's confirmation; None: wait
    # closed with the stage; False: the runtime's, shared with the router's cascade
    owned: bool = True


@dataclass(frozen=True, slots=True)
class CascadeRule(DecisionRule):
    """e5's rule (``threshold``: e5's) judging the static index's candidates at the bound."""

    static_bound: float = 1.0

    def judge(
        self,
        question: str,
        candidate: str,
        similarity: float,
        vectors: tuple[Vector, Vector] | None = None,
    ) -> Verdict:
        at_bound = DecisionRule(self.static_bound, self.guards, self.verifier)
        return at_bound.judge(question, candidate, similarity, vectors)


def cascade_rule(rule: DecisionRule, step: CascadeStep) -> CascadeRule:
    return CascadeRule(rule.threshold, rule.guards, rule.verifier, step.static_bound)


async def e5_similarity(
    step: CascadeStep, e5: AsyncEmbedder, question: LazyEmbedding, candidate: str
) -> float:
    """e5's cosine of the request's question and a stored one, within ``step.timeout_s``
    (``TimeoutError`` past it; the embedder's own errors as they come)."""

    expect = getattr(e5, "expected_ms", None)
    if step.timeout_s is not None and callable(expect):
        texts = [candidate] if question.computed else [question.text, candidate]
        wait = expect(texts)
        if wait is not None and wait > step.timeout_s * 1000:
            # it would miss the deadline: no work is started (a long text, a backed-up queue)
            raise TimeoutError(f"e5 expected in {wait:.0f} ms")

    async def both() -> float:
        # shielded: the deadline gives up on the request's vector, it does not cancel it (the
        # router awaits the same vector next)
        q, c = await asyncio.gather(asyncio.shield(question.vector()), e5.embed_one(candidate))
        return float(np.dot(q, c))

    return await asyncio.wait_for(both(), step.timeout_s)


async def aclose(step: CascadeStep) -> None:
    close = getattr(step.static, "aclose", None) if step.owned else None
    if close is not None:
        await close()
