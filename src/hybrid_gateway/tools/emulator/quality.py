"""The quality model: answers that are right or wrong by a workload's labels.

``QualityAnswers`` reads a workload file once, at start-up, and indexes its items by
``question_key`` of the last user message.  An emulator playing the ``light`` or the ``heavy``
tier then answers a known question with its mark first, ``⟦<group>|ok⟧`` when that tier answers
the item well (``labels.light_ok`` / ``labels.heavy_ok``) and ``⟦<group>|wrong⟧`` otherwise,
followed by deterministic pseudo words so the whole answer is ``expected_output_tokens`` tokens
long (or just the mark when that is longer).  A question the workload does not hold gets the
fallback's answer (``PseudoAnswers``), with no mark.

Labels come only from the file: nothing in a request can change them.  The server cuts an
answer to the request's ``max_tokens`` token pieces, so a capped answer keeps its whole mark as
long as ``max_tokens >= mark_tokens(group)`` (4 + the tokens of the group id: 5 for ``g1``);
``QualityAnswers.min_max_tokens`` is the largest such minimum over the workload.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from hybrid_gateway.accounting.tokens import count_tokens, split_tokens
from hybrid_gateway.tools.workload.schema import (
    WorkloadItem,
    answer_mark,
    last_user_text,
    question_key,
    read_workload,
)

from .text import WORDS, AnswerSource, Prompt, stable_hash

TIERS = ("light", "heavy")


@dataclass(frozen=True, slots=True)
class Expected:
    """What one tier's answer to one question looks like."""

    group: str
    ok: bool
    tokens: int  # the natural answer length, mark included


def mark_tokens(group: str) -> int:
    """Token pieces of a mark for ``group``; ``ok`` and ``wrong`` take one piece each."""
    return count_tokens(answer_mark(group, False))


class QualityAnswers:
    """An ``AnswerSource`` that marks each workload question right or wrong for one tier."""

    def __init__(self, items: Iterable[WorkloadItem], tier: str, fallback: AnswerSource) -> None:
        if tier not in TIERS:
            raise ValueError(f"tier must be one of {', '.join(TIERS)}, not {tier!r}")
        index: dict[str, Expected] = {}
        for item in items:
            ok = item.labels.light_ok if tier == "light" else item.labels.heavy_ok
            expected = Expected(item.labels.group, ok, item.expected_output_tokens)
            index.setdefault(question_key(last_user_text(item.messages)), expected)
        self.tier = tier
        self._index = MappingProxyType(index)
        self._fallback = fallback

    @classmethod
    def from_file(cls, path: Path, tier: str, fallback: AnswerSource) -> QualityAnswers:
        """Load the labels from a workload file; ``ValueError`` if it cannot be read."""
        try:
            items = read_workload(path)
        except OSError as exc:
            raise ValueError(f"cannot read workload {path}: {exc.strerror or exc}") from None
        except (TypeError, KeyError, ValueError) as exc:
            raise ValueError(f"workload {path} is not valid: {exc}") from None
        return cls(items, tier, fallback)

    def __len__(self) -> int:
        return len(self._index)

    @property
    def min_max_tokens(self) -> int:
        """The smallest ``max_tokens`` that keeps every question's whole mark."""
        return max((mark_tokens(e.group) for e in self._index.values()), default=0)

    def expected(self, prompt: Prompt) -> Expected | None:
        return self._index.get(question_key(prompt.last_user))

    def answer(self, prompt: Prompt, model: str) -> str:
        expected = self.expected(prompt)
        if expected is None:
            return self._fallback.answer(prompt, model)
        return marked_answer(expected, model, prompt.last_user)


def marked_answer(expected: Expected, model: str, question: str) -> str:
    """The mark, then ``[model]`` and pseudo words, ``expected.tokens`` pieces in all.

    The words are seeded by model and question, so an answer is the same every time; the text
    ends on a full stop and is cut at piece boundaries, so its token count is exact.
    """
    pieces = split_tokens(answer_mark(expected.group, expected.ok))
    if expected.tokens <= len(pieces):
        return "".join(pieces)
    rng = random.Random(stable_hash(model, question.strip()))
    pieces.extend(split_tokens(f" [{model}]"))
    while len(pieces) < expected.tokens - 1:
        pieces.extend(split_tokens(" " + rng.choice(WORDS)))
    return "".join(pieces[: expected.tokens - 1]) + "."
