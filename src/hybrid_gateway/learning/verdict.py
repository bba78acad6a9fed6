"""The judge's rubric (fixed and versioned) and the strict parser of its answer.

A verdict compares answer A (the one the client got: a light lane's, or a cached one) with
answer B (the reference: a fresh answer to the very question, from the heavy lane or the
routed lane).  ``a_worse`` means the decision under audit cost quality: the light lane was not
good enough, or the cache hit was false.
"""

from __future__ import annotations

import enum

__all__ = ["RUBRIC_VERSION", "Verdict", "VerdictRefused", "parse_verdict", "rubric_messages"]

RUBRIC_VERSION = "rubric-1"


class Verdict(enum.StrEnum):
    EQUIVALENT = "equivalent"
    A_WORSE = "a_worse"
    B_WORSE = "b_worse"


class VerdictRefused(ValueError):
    """The judge answered something other than one of the rubric's three answers."""


_RUBRIC = """You compare two answers to the same question.
Reply with exactly one word and nothing else:
EQUIVALENT if both answers are equally correct and useful,
A_WORSE if answer A is less correct or less useful than answer B,
B_WORSE if answer B is less correct or less useful than answer A."""

_ANSWERS = {v.value.upper(): v for v in Verdict}


def rubric_messages(question: str, answer_a: str, answer_b: str) -> list[dict[str, str]]:
    """The chat messages sent to the judge lane (``RUBRIC_VERSION``)."""
    user = f"Question:\n{question}\n\nAnswer A:\n{answer_a}\n\nAnswer B:\n{answer_b}"
    return [{"role": "system", "content": _RUBRIC}, {"role": "user", "content": user}]


def parse_verdict(text: str) -> Verdict:
    """One of the rubric's answers, alone (surrounding blanks and one final full stop allowed);
    anything else is refused: a judge that explains, hedges or answers two words is not read."""
    word = text.strip()
    if word.endswith("."):
        word = word[:-1]
    verdict = _ANSWERS.get(word)
    if verdict is None:
        raise VerdictRefused(f"not a rubric answer: {text[:40]!r}")
    return verdict
