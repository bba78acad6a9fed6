"""Collect the flagged requests of a window: thumbs-down, and re-asks (silent thumbs-down).

A **re-ask** is the same tenant asking the same question again soon after an answer: within
``REASK_WINDOW_S`` of the first request's answer (its start plus its latency), with an equal
stored prompt (text or hash) or, where the text is stored, an embedding cosine of at least
``REASK_SIMILARITY``.  The first request is flagged; the second is only its evidence.

What the review can do depends on ``server.request_log.prompts``: ``full`` and ``redacted``
keep text (re-asks by meaning, clusters, keywords, replay); ``hash`` keeps only a digest
(re-asks by equal hash; flagged requests are grouped by the rule that sent them, nothing is
replayed); ``none`` keeps nothing, and the review refuses to run.

Each flagged request gets the direction a better route would have taken (``want``): the
complex lane for a light answer rated wrong or too shallow (or re-asked), the simple lane for
a heavy answer rated too slow; None when a different lane would not have helped (a wrong
answer from the heavy lane, a cache hit).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from hybrid_gateway.embedding.base import Vector
from hybrid_gateway.observability.prompts import PromptMode
from hybrid_gateway.review.reader import LoggedRequest, Rating

# Asked again this soon after the answer: the user was not satisfied with it.
REASK_WINDOW_S = 60.0
# Cosine (multilingual-e5-small) at or above which two questions count as the same one asked
# again: paraphrases with a typo fixed or a word changed score 0.93-0.99 under this model,
# different questions on one topic mostly below 0.92.
REASK_SIMILARITY = 0.94
# Answers that did not reach an upstream: a different route would not have changed them.
CACHE_HITS = frozenset({"exact", "semantic"})

Want = Literal["complex", "simple"]
RE_ASK = "re_ask"


class ReviewError(Exception):
    """The review cannot run as asked (no prompts stored, no log, a bad --since)."""


@dataclass(frozen=True, slots=True)
class Flagged:
    request: LoggedRequest
    reason: str  # the feedback reason ("wrong", "too_slow", ...), "re_ask", or "unrated"
    comment: str | None
    want: Want | None


@dataclass(frozen=True, slots=True)
class Collection:
    mode: PromptMode
    since: float
    until: float
    requests: tuple[LoggedRequest, ...]
    flagged: tuple[Flagged, ...]
    thumbs_down: int
    re_asks: int

    @property
    def has_text(self) -> bool:
        return self.mode in ("full", "redacted")

    def unflagged(self) -> list[LoggedRequest]:
        ids = {f.request.request_id for f in self.flagged}
        return [r for r in self.requests if r.request_id not in ids]


def check_mode(mode: PromptMode, source: str = "<config>") -> None:
    if mode == "none":
        raise ReviewError(
            f"{source}: the request log stores no prompts (server.request_log.prompts: none): "
            "the review needs them; set server.request_log.prompts to redacted or full (hash "
            "allows re-asks by equal text only), restart the gateway and review the traffic "
            "after that"
        )


def want_of(
    request: LoggedRequest, reason: str, simple_lane: str, complex_lane: str
) -> Want | None:
    if request.cache in CACHE_HITS:
        return None
    if reason == "too_slow":
        return "simple" if request.lane == complex_lane else None
    return "complex" if request.lane == simple_lane else None


def reask_candidates(requests: Sequence[LoggedRequest]) -> list[tuple[int, int]]:
    """(first, again) index pairs: same tenant, ``again`` started within the window after
    ``first`` was answered.  ``requests`` is in time order."""
    by_tenant: dict[str, list[int]] = {}
    for i, r in enumerate(requests):
        by_tenant.setdefault(r.tenant, []).append(i)
    pairs = []
    for indexes in by_tenant.values():
        starts = [requests[i].ts for i in indexes]
        for pos, i in enumerate(indexes):
            answered = requests[i].ts + requests[i].latency_ms / 1000.0
            stop = bisect.bisect_right(starts, answered + REASK_WINDOW_S)
            for j in indexes[pos + 1 : stop]:
                if requests[j].ts >= answered and requests[j].prompt is not None:
                    pairs.append((i, j))
    return pairs


def find_reasks(
    requests: Sequence[LoggedRequest],
    pairs: Sequence[tuple[int, int]],
    vectors: Mapping[str, Vector],
) -> dict[int, int]:
    """first -> again for the candidate pairs that ask the same question."""
    found: dict[int, int] = {}
    for i, j in pairs:
        if i in found:
            continue
        a, b = requests[i].prompt, requests[j].prompt
        if a is None or b is None:
            continue
        same = a == b or (
            a in vectors
            and b in vectors
            and float(np.dot(vectors[a], vectors[b])) >= REASK_SIMILARITY
        )
        if same:
            found[i] = j
    return found


def collect(
    requests: Sequence[LoggedRequest],
    ratings: Sequence[Rating],
    window: tuple[float, float],
    mode: PromptMode,
    lanes: tuple[str, str],
    vectors: Mapping[str, Vector],
) -> Collection:
    """The flagged requests among ``requests`` (the window's, in time order).  ``lanes`` is
    (simple, complex); ``vectors`` holds the embeddings of the prompts in the re-ask candidate
    pairs (empty in mode ``hash``: equal hashes only)."""
    check_mode(mode)
    by_id = {r.request_id: r for r in ratings}
    reasks = find_reasks(requests, reask_candidates(requests), vectors)
    flagged = []
    for i, request in enumerate(requests):
        rating = by_id.get(request.request_id)
        if rating is None and i not in reasks:
            continue
        reason = (rating.reason or "unrated") if rating is not None else RE_ASK
        comment = rating.comment if rating is not None else None
        flagged.append(Flagged(request, reason, comment, want_of(request, reason, *lanes)))
    return Collection(
        mode, window[0], window[1], tuple(requests), tuple(flagged),
        thumbs_down=sum(1 for r in requests if r.request_id in by_id), re_asks=len(reasks),
    )  # fmt: skip
