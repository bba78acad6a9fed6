"""The approximate tokenizer shared by cost accounting and the emulator."""

from __future__ import annotations

import pytest

from hybrid_gateway.accounting.tokens import count_prompt_tokens, count_tokens, split_tokens

ENGLISH = (
    "Continuous batching gives a finished sequence's slot to a new request at once, so short "
    "requests are not stuck behind long ones that started earlier in the same batch."
)


@pytest.mark.parametrize(
    "text", [ENGLISH, "退款政策是什么？请说明。", "  leading and trailing  ", "a\n\nb\tc", ""]
)
def test_pieces_join_back_to_the_text(text: str) -> None:
    assert "".join(split_tokens(text)) == text
    assert count_tokens(text) == len(split_tokens(text))


def test_cjk_characters_count_one_token_each() -> None:
    assert count_tokens("退款政策是什么") == 7
    assert count_tokens("花呗怎么还款？") == 7  # the full-width question mark too


def test_latin_words_count_about_one_point_three_tokens() -> None:
    words = len(ENGLISH.split())
    assert 1.1 <= count_tokens(ENGLISH) / words <= 1.6


def test_prompt_framing() -> None:
    assert count_prompt_tokens(["hi", "你好"]) == count_tokens("hi") + 3 + 2 + 3 + 3
    assert count_prompt_tokens([]) == 3
