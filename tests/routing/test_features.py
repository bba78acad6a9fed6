"""The classifier's text features: exact up to ``SHARE_CHARS``, bounded work past it."""

from __future__ import annotations

import math
import re
import sys

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid_gateway.routing.features import (
    _CODE,
    _MATH,
    _TABLE_END,
    SHARE_CHARS,
    _is_cjk,
    text_features,
)
from hybrid_gateway.tools.overhead.prompts import prompt_text

QUESTION = "Prove that 2 + 2 = 4?\nUse Peano's axioms, e.g. `def succ(n): return n + 1`; 证明它。"


def test_features_of_a_question_up_to_the_sample_size_count_every_character() -> None:
    text = (QUESTION + " ") * (SHARE_CHARS // (len(QUESTION) + 1))
    assert len(text) <= SHARE_CHARS
    features = text_features(text)
    assert features[0] == np.float32(math.log1p(len(text)))
    assert features[1] == np.float32(math.log1p(len(re.findall(r"\w+", text))))
    assert features[3] == np.float32(sum(c.isdigit() for c in text) / len(text))
    assert features[7] == 1.0  # code


def test_a_huge_prompt_is_read_from_a_sample_with_the_same_shares() -> None:
    unit = QUESTION + " "
    short, huge = unit * 200, unit * 20_000  # 18 KB and 1.8 MB of the same text
    a, b = text_features(short), text_features(huge)
    assert b[0] == np.float32(math.log1p(len(huge)))  # the length is the whole text's
    true_words = len(re.findall(r"\w+", huge))
    assert abs(math.expm1(float(b[1])) - true_words) / true_words < 0.01
    assert np.allclose(a[3:], b[3:], atol=0.01)  # shares, code, question marks, word length


def test_code_at_the_end_of_a_long_document_is_still_code() -> None:
    document = "The quarterly report says revenue grew. " * 2_000  # 80 KB of prose
    assert text_features(document)[7] == 0.0
    assert text_features(document + "\n```\ndef total(xs):\n    return sum(xs)\n```")[7] == 1.0


# -- the character classes, counted in C (routing/features.py ``_count``) ----------------------
def _loop_features(text: str) -> npt.NDArray[np.float32]:
    """The features as the per-character loop computed them before: the reference."""
    chars = len(text)
    sample = text[:SHARE_CHARS]
    words = re.findall(r"\w+", sample)
    word_count = len(words) * chars / len(sample) if len(sample) < chars else len(words)
    denom = max(len(sample), 1)
    digits = math_chars = upper = cjk = 0
    for ch in sample:
        if ch.isdigit():
            digits += 1
        elif ch in _MATH:
            math_chars += 1
        elif ch.isupper():
            upper += 1
        elif _is_cjk(ch):
            cjk += 1
    code = _CODE.search(sample) or _CODE.search(text[-SHARE_CHARS:])
    return np.array(
        [math.log1p(chars), math.log1p(word_count), math.log1p(text.count("\n")),
         digits / denom, math_chars / denom, upper / denom, cjk / denom, 1.0 if code else 0.0,
         min(text.count("?") + text.count("?"), 5),
         min(sum(map(len, words)) / max(len(words), 1), 20.0) / 10],
        dtype=np.float32,
    )  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=300) | st.text(alphabet=st.characters(max_codepoint=0xFFFF)))
def test_counted_classes_equal_the_loop_on_any_text(text: str) -> None:
    np.testing.assert_array_equal(text_features(text), _loop_features(text))


def test_counted_classes_equal_the_loop_on_real_prompts() -> None:
    texts = [QUESTION, "全角１２３ＡＢＣ ①②③ ²³ Ⅻ ⓐⒶ ﹢＝ 한국어 カタカナ ひらがな"]
    texts += [prompt_text(kind, f"t-0-{n}", n) for kind in ("short", "long") for n in range(5)]
    texts.append("x" * (SHARE_CHARS + 10) + "\ndef f(): return 1")  # code only in the tail
    for text in texts:
        np.testing.assert_array_equal(text_features(text), _loop_features(text))


def test_the_classes_share_no_character_and_end_below_the_tables_bound() -> None:
    """Why the four counts can replace the loop's if/elif chain, and why the tables stop at
    U+20000: scanned over every code point."""
    for code in range(sys.maxunicode + 1):
        ch = chr(code)
        classes = ch.isdigit() + (ch in _MATH) + ch.isupper() + _is_cjk(ch)
        assert classes <= 1, hex(code)
        if code >= _TABLE_END:
            assert classes == 0, hex(code)
