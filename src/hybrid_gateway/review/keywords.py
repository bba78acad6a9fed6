"""Keywords that pick out a cluster: n-grams common in its questions and rare elsewhere.

Candidates are word 1- and 2-grams of Latin-script text (lower-cased; stop words and words
under three letters dropped as unigrams) and 2- to 4-character runs of CJK text (Chinese has
no spaces: a keyword like 证明 is a character bigram).  A candidate is then counted the way a
rule matches (``routing/rules.py``: a case-insensitive substring of the last user message), in
the cluster and in the unflagged traffic, so what is measured here is what a rule would do.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_WORD = re.compile(r"[a-z][a-z0-9'+-]*")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_STOP = frozenset((
    "the", "and", "for", "are", "but", "not", "you", "your", "with", "what", "how", "why",
    "when", "where", "which", "who", "this", "that", "these", "those", "from", "into", "about",
    "can", "could", "would", "should", "does", "did", "was", "were", "has", "have", "had",
    "will", "its", "it's", "there", "their", "them", "they", "then", "than", "our", "out",
    "all", "any", "some", "one", "two", "may", "might", "must", "also", "just", "please",
    "tell", "give", "explain", "me", "my", "i", "a", "an", "of", "to", "in", "on", "is", "be",
    "do", "as", "at", "by", "or", "if", "so", "no",
))  # fmt: skip
# A keyword must appear in at least this share of the cluster ...
MIN_CLUSTER_SHARE = 0.3
# ... and in at most this share of the unflagged traffic.
MAX_OTHER_SHARE = 0.02
MAX_KEYWORDS = 3


@dataclass(frozen=True, slots=True)
class Keyword:
    text: str
    in_cluster: int  # cluster questions containing it
    in_other: int  # unflagged questions containing it


def candidates(text: str) -> set[str]:
    """The n-grams of one question that could be a rule keyword."""
    lowered = text.lower()
    found: set[str] = set()
    words = _WORD.findall(lowered)
    found.update(w for w in words if len(w) >= 3 and w not in _STOP)
    pairs = itertools.pairwise(words)
    found.update(f"{a} {b}" for a, b in pairs if not (a in _STOP and b in _STOP))
    for run in _CJK.findall(lowered):
        for n in (2, 3, 4):
            found.update(run[i : i + n] for i in range(len(run) - n + 1))
    return found


def _count(keyword: str, texts: Iterable[str]) -> int:
    return sum(1 for t in texts if keyword in t)


def distinctive(cluster: Sequence[str], others: Sequence[str]) -> list[Keyword]:
    """Candidates in at least ``MIN_CLUSTER_SHARE`` of ``cluster`` (and two of its questions)
    and at most ``MAX_OTHER_SHARE`` of ``others``, best first: most cluster questions, fewest
    others, then the one of less common parts, the shorter (it generalises to new wordings),
    then alphabetical."""
    lowered = [t.lower() for t in cluster]
    rest = [t.lower() for t in others]
    seen: dict[str, int] = {}
    for text in lowered:
        for gram in candidates(text):
            seen[gram] = seen.get(gram, 0) + 1
    need = max(2, int(MIN_CLUSTER_SHARE * len(lowered) + 0.999))
    found = []
    for gram in seen:
        hits = _count(gram, lowered)  # substring count: what a rule would match
        if hits < need:
            continue
        other = _count(gram, rest)
        if other <= MAX_OTHER_SHARE * len(rest):
            found.append(Keyword(gram, hits, other))
    return sorted(found, key=lambda k: (-k.in_cluster, k.in_other, _commonness(k.text, rest),
                                        len(k.text), k.text))  # fmt: skip


def _commonness(gram: str, others: Sequence[str]) -> int:
    """How common the gram's words (and CJK characters) are in ``others``: between two grams
    that match the same questions, the one without a common part ("么证" against "证明", which
    overlaps the frequent "怎么"; "i prove" against "prove") is the real keyword."""
    units = _WORD.findall(gram) + [c for run in _CJK.findall(gram) for c in run]
    return sum(_count(u, others) for u in units)


def choose(cluster: Sequence[str], others: Sequence[str]) -> list[Keyword]:
    """A few keywords covering as much of the cluster as possible (greedy set cover): each
    one added must match questions the ones before it missed."""
    lowered = [t.lower() for t in cluster]
    uncovered = set(range(len(lowered)))
    chosen: list[Keyword] = []
    pool = distinctive(cluster, others)
    while uncovered and len(chosen) < MAX_KEYWORDS:
        best, gain = None, 0
        for keyword in pool:
            if any(c.text in keyword.text or keyword.text in c.text for c in chosen):
                continue
            covers = sum(1 for i in uncovered if keyword.text in lowered[i])
            if covers > gain:
                best, gain = keyword, covers
        if best is None:
            break
        chosen.append(best)
        uncovered -= {i for i in uncovered if best.text in lowered[i]}
    return chosen
