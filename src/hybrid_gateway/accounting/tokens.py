"""An approximate tokenizer, shared by cost accounting and the emulator.

Used where no real tokenizer answers: the gateway bills a stream or a body whose upstream gave
no ``usage`` with it (and marks the usage ``estimated``), and the emulator counts and streams
its answers with it.  It splits text into pieces that concatenate back to the text exactly:
each CJK character is one piece, other words are cut into pieces of at most five characters (so
an average English word is about 1.3 pieces), every other visible character is a piece, and
whitespace rides on the piece after it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# CJK ideographs and punctuation, kana, hangul, full-width forms: one token per character.
_CJK = (
    "\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\U00020000-\U0002ffff"
)
_TOKEN = re.compile(rf"\s*(?:[{_CJK}]|[^\W{_CJK}]{{1,5}}|\S)|\s+")

# Chat-format overhead per message and for priming the reply (OpenAI's cookbook counts 3 + 3).
PER_MESSAGE_TOKENS = 3
REPLY_PRIMING_TOKENS = 3


def split_tokens(text: str) -> list[str]:
    """The token pieces of ``text``; ``"".join(split_tokens(t)) == t``."""
    return _TOKEN.findall(text)


def count_tokens(text: str) -> int:
    """Approximate token count: CJK chars count 1 each, latin words ~1.3 each."""
    return len(_TOKEN.findall(text))


def count_prompt_tokens(contents: Iterable[str]) -> int:
    """Tokens of a chat prompt whose messages have these texts, framing included."""
    return sum(count_tokens(c) + PER_MESSAGE_TOKENS for c in contents) + REPLY_PRIMING_TOKENS
