"""Questions that a pair file labels the same share one paraphrase group in a build.

A build draws its fresh questions from the pair files' rows one by one, so two rows whose
questions the data itself labels paraphrases (LCQMC links 微信公众平台怎么盈利？ and
微信公众平台如何盈利) used to get two groups, and an answer served for one to the other was
counted a false hit by the quality marks.  ``KnownParaphrases`` keeps every label-1 link of the
pair sources a build has loaded (one hop: a chain of links is not followed, since "the same
question" does not carry along a chain) on normalised texts (NFKC, lower case, punctuation and
blanks dropped), and the group of each text asked so far: a question whose normalised text, or
one of whose label-1 partners, was asked before joins that question's group.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from .sources import Pair

__all__ = ["KnownParaphrases", "normalised"]

_NOT_WORD = re.compile(r"[\W_]+", re.UNICODE)


def normalised(text: str) -> str:
    return _NOT_WORD.sub("", unicodedata.normalize("NFKC", text).lower())


class KnownParaphrases:
    def __init__(self) -> None:
        self._links: dict[str, set[str]] = {}
        self._groups: dict[str, str] = {}  # normalised text asked -> its group

    def add(self, pairs: Iterable[Pair]) -> None:
        """The label-1 links of a pair source."""
        for pair in pairs:
            if not pair.same:
                continue
            a, b = normalised(pair.prompt.text), normalised(pair.partner)
            if a and b and a != b:
                self._links.setdefault(a, set()).add(b)
                self._links.setdefault(b, set()).add(a)

    def group_of(self, text: str) -> str | None:
        """The group of an earlier question that ``text`` is known to ask again, if any (the
        earliest asked of them, for a text linked to several)."""
        key = normalised(text)
        if key in self._groups:
            return self._groups[key]
        known = [self._groups[other] for other in self._links.get(key, ()) if other in self._groups]
        return min(known) if known else None  # group names count up: min is the earliest

    def asked(self, text: str, group: str) -> None:
        self._groups.setdefault(normalised(text), group)
