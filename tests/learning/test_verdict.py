"""The rubric's verdict parser refuses anything but its three answers; the marks judge."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hybrid_gateway.learning.judges import JudgeRefused, marks_verdict
from hybrid_gateway.learning.verdict import (
    RUBRIC_VERSION,
    Verdict,
    VerdictRefused,
    parse_verdict,
    rubric_messages,
)


@pytest.mark.parametrize(
    ("text", "verdict"),
    [("EQUIVALENT", Verdict.EQUIVALENT), ("A_WORSE", Verdict.A_WORSE),
     (" B_WORSE.\n", Verdict.B_WORSE), ("A_WORSE.", Verdict.A_WORSE)],
)  # fmt: skip
def test_the_rubric_answers_are_read(text: str, verdict: Verdict) -> None:
    assert parse_verdict(text) is verdict


@pytest.mark.parametrize(
    "text",
    ["", "equivalent", "A worse", "A_WORSE B_WORSE", "I think A_WORSE", "A_WORSE, because",
     "EQUIVALENT..", "B_WORSE!", "**A_WORSE**", "A_WORSE\nB_WORSE", "a_worse"],
)  # fmt: skip
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(VerdictRefused):
        parse_verdict(text)


@given(st.text(max_size=30))
def test_only_the_three_words_parse(text: str) -> None:
    word = text.strip()
    word = word[:-1] if word.endswith(".") else word
    try:
        verdict = parse_verdict(text)
    except VerdictRefused:
        assert word not in {"EQUIVALENT", "A_WORSE", "B_WORSE"}
    else:
        assert verdict.value.upper() == word


def test_the_rubric_is_fixed_and_versioned() -> None:
    messages = rubric_messages("q?", "a", "b")
    assert RUBRIC_VERSION == "rubric-1"
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "EQUIVALENT" in messages[0]["content"] and "q?" in messages[1]["content"]
    assert messages == rubric_messages("q?", "a", "b")


@pytest.mark.parametrize(
    ("a", "b", "verdict"),
    [("⟦g1|ok⟧ x", "⟦g1|ok⟧ y", Verdict.EQUIVALENT),
     ("⟦g1|wrong⟧ x", "⟦g1|wrong⟧ y", Verdict.EQUIVALENT),
     ("⟦g1|wrong⟧ x", "⟦g1|ok⟧ y", Verdict.A_WORSE),
     ("⟦g1|ok⟧ x", "⟦g1|wrong⟧ y", Verdict.B_WORSE),
     ("⟦g2|ok⟧ x", "⟦g1|ok⟧ y", Verdict.A_WORSE)],  # another question's answer: a false hit
)  # fmt: skip
def test_marks(a: str, b: str, verdict: Verdict) -> None:
    assert marks_verdict(a, b) is verdict


def test_marks_without_a_mark_give_no_verdict() -> None:
    with pytest.raises(JudgeRefused):
        marks_verdict("plain text", "⟦g1|ok⟧")
