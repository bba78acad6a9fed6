"""The classifier's text features: exact up to ``SHARE_CHARS``, bounded work past it."""

from __future__ import annotations

import math
import re

import numpy as np

from hybrid_gateway.routing.features import SHARE_CHARS, text_features

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
