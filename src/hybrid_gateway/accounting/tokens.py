"""Token counting when an upstream reports no usage.

An approximation of BPE tokenizers that is good enough for cost accounting: each CJK character
(and other wide script character) is about one token, latin words about 1.3 tokens, and
punctuation one token each.  Marked ``estimated`` wherever it is used.
"""

from __future__ import annotations

import math
import re

_WIDE = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN_RE = re.compile(rf"[{_WIDE}]|[^\s{_WIDE}\W]+|[^\s\w]", re.UNICODE)


def estimate_tokens(text: str) -> int:
    """Approximate token count of ``text`` (0 for empty text)."""
    wide = words = other = 0
    for match in _TOKEN_RE.finditer(text):
        piece = match.group()
        if len(piece) == 1 and re.match(rf"[{_WIDE}]", piece):
            wide += 1
        elif piece[0].isalnum() or piece[0] == "_":
            words += 1 + len(piece) // 8  # long words split into several tokens
        else:
            other += 1
    return wide + math.ceil(words * 1.3) + other


def estimate_prompt_tokens(messages: list[str]) -> int:
    """Tokens of a chat prompt: content plus ~4 tokens of framing per message."""
    return sum(estimate_tokens(text) + 4 for text in messages) + 2
