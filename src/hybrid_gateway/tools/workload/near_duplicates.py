"""Questions whose relation to an earlier one nobody labelled, and that nearly repeat it.

A build knows how two of its questions relate only where the data says so: a label-1 pair (a
paraphrase: one group), a label-0 pair (a trap: two groups, ``trap_of`` set), or two texts
with little in common (two groups).  Two rows of a pair file that nearly repeat each other
without any label between them (LCQMC's 现在什么单机游戏好玩？ and 有什么单机游戏好玩的, drawn
as two fresh questions) got two groups anyway, and a cache answer served from one to the other
was counted a false hit by the quality marks: in a 3,000-item LCQMC build, 81 of the 158 cache
audits the marks judged false were such pairs, and 22 of the first 25 read as paraphrases.

``NearDuplicates`` keeps the questions asked so far by their word bigrams (a CJK character is
a word; Latin words and numbers are words) and tells whether a new text's Dice coefficient with
any earlier question outside the groups it is known to relate to reaches ``cut``.  The build
then skips that text (it draws another), so every pair of questions that looks alike is one
whose relation the data gives.  Lexical, so the check does not depend on the embedder a bench
measures.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Collection

__all__ = ["NearDuplicates", "shingles"]

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_WORD = re.compile(f"[{_CJK}]|[^\\W_{_CJK}]+", re.UNICODE)


def shingles(text: str) -> frozenset[tuple[str, ...]]:
    """The text's word bigrams (its one word, for a one-word text), case and width folded."""
    words = _WORD.findall(unicodedata.normalize("NFKC", text).lower())
    if len(words) < 2:
        return frozenset([tuple(words)])
    return frozenset(itertools.pairwise(words))


class NearDuplicates:
    def __init__(self, cut: float) -> None:
        self.cut = cut
        self._asked: list[tuple[frozenset[tuple[str, ...]], str]] = []  # shingles, group
        self._index: dict[tuple[str, ...], list[int]] = {}

    def add(self, text: str, group: str) -> None:
        own = shingles(text)
        self._asked.append((own, group))
        for shingle in own:
            self._index.setdefault(shingle, []).append(len(self._asked) - 1)

    def conflicts(self, text: str, related: Collection[str] = ()) -> bool:
        """Whether ``text`` nearly repeats (Dice >= cut) a question asked in a group other
        than ``related`` (the groups the data relates it to)."""
        own = shingles(text)
        seen: set[int] = set()
        for shingle in own:
            for index in self._index.get(shingle, ()):
                if index in seen:
                    continue
                seen.add(index)
                other, group = self._asked[index]
                if group in related:
                    continue
                if 2 * len(own & other) / (len(own) + len(other)) >= self.cut:
                    return True
        return False
