"""The judge seam: ``compare(question, answer_a, answer_b)`` -> a verdict (or none yet).

- ``llm``: the fixed rubric (``verdict.py``) sent to the lane the config names; its answer is
  parsed strictly, anything but the rubric's three answers is refused (no verdict stored).
- ``marks``: the emulator's quality marks (``⟦group|ok⟧`` at the head of each answer, from a
  workload's labels; ``tools/emulator/quality.py``), for the bench.  An answer to another
  group's question (a false cache hit) is worse than the fresh reference.
- ``feedback``: a human rating through ``POST /v1/feedback`` decides later: the audit is stored
  pending, and the verdict is read from the rating (``store.LABELS_SQL``).  No shadow request.

A judge never sees more than the question and the two answers, and its output goes only to the
verdict store: nothing of it reaches a client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from hybrid_gateway.learning.settings import JudgeConfig
from hybrid_gateway.learning.verdict import (
    RUBRIC_VERSION,
    Verdict,
    VerdictRefused,
    parse_verdict,
    rubric_messages,
)
from hybrid_gateway.tools.workload.schema import parse_mark

__all__ = [
    "FeedbackJudge", "Judge", "Judgement", "LaneAnswer", "LlmJudge", "MarksJudge",
    "build_judge",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict | None  # None: decided later (feedback)
    cost_usd: float = 0.0


@dataclass(frozen=True, slots=True)
class LaneAnswer:
    text: str
    cost_usd: float


# (lane, chat body) -> the lane's answer text and what it cost.
AskLane = Callable[[str, Mapping[str, Any]], Awaitable[LaneAnswer]]


class Judge(Protocol):
    name: str
    rubric: str | None  # the rubric version a verdict was made under (None: no rubric)
    # False: the judge decides without a second answer (no shadow request is sent).
    needs_answer_b: bool

    async def compare(self, question: str, answer_a: str, answer_b: str) -> Judgement: ...


class LlmJudge:
    name = "llm"
    rubric: str | None = RUBRIC_VERSION
    needs_answer_b = True

    def __init__(self, ask: AskLane, lane: str, max_tokens: int) -> None:
        self._ask = ask
        self._lane = lane
        self._max_tokens = max_tokens

    async def compare(self, question: str, answer_a: str, answer_b: str) -> Judgement:
        body = {
            "model": "judge", "messages": rubric_messages(question, answer_a, answer_b),
            "temperature": 0, "max_tokens": self._max_tokens,
        }  # fmt: skip
        answer = await self._ask(self._lane, body)
        try:
            verdict = parse_verdict(answer.text)
        except VerdictRefused as exc:
            raise JudgeRefused(str(exc), answer.cost_usd) from None
        return Judgement(verdict, answer.cost_usd)


class JudgeRefused(VerdictRefused):
    """No verdict; ``cost_usd`` was still spent on asking."""

    def __init__(self, message: str, cost_usd: float = 0.0) -> None:
        super().__init__(message)
        self.cost_usd = cost_usd


class MarksJudge:
    name = "marks"
    rubric: str | None = None
    needs_answer_b = True

    async def compare(self, question: str, answer_a: str, answer_b: str) -> Judgement:
        return Judgement(marks_verdict(answer_a, answer_b))


def marks_verdict(answer_a: str, answer_b: str) -> Verdict:
    mark_a, mark_b = parse_mark(answer_a), parse_mark(answer_b)
    if mark_a is None or mark_b is None:
        raise JudgeRefused("an answer carries no quality mark")
    (group_a, ok_a), (group_b, ok_b) = mark_a, mark_b
    if group_a != group_b or (ok_b and not ok_a):
        return Verdict.A_WORSE  # answers another question, or is wrong where B is right
    if ok_a and not ok_b:
        return Verdict.B_WORSE
    return Verdict.EQUIVALENT


class FeedbackJudge:
    name = "feedback"
    rubric: str | None = None
    needs_answer_b = False

    async def compare(self, question: str, answer_a: str, answer_b: str) -> Judgement:
        return Judgement(None)


def build_judge(config: JudgeConfig, ask: AskLane) -> Judge:
    builders: dict[str, Callable[[], Judge]] = {
        "llm": lambda: LlmJudge(ask, config.lane or "", config.max_tokens),
        "marks": MarksJudge,
        "feedback": FeedbackJudge,
    }
    return builders[config.kind]()
