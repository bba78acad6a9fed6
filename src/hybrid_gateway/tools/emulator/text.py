"""Deterministic answer text and an approximate tokenizer.

The tokenizer splits text into pieces that concatenate back to the text exactly: each CJK
character is one piece, other words are cut into pieces of at most five characters (so an average
English word is about 1.3 pieces), every other visible character is a piece, and whitespace rides
on the piece after it.  Streaming sends one piece per chunk, and ``count_tokens`` is the number of
pieces, so usage and chunk counts always agree.

Answers come from an ``AnswerSource``.  The default, ``PseudoAnswers``, writes pseudo words
seeded by a hash of the prompt and model, with a length picked from the profile's range by a hash
of the prompt alone; a quality model (does the light/heavy model answer this item correctly?)
plugs in as another ``AnswerSource`` without touching the engine or server.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from typing import Protocol

# CJK ideographs and punctuation, kana, hangul, full-width forms: one token per character.
_CJK = (
    "\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\U00020000-\U0002ffff"
)
_TOKEN = re.compile(rf"\s*(?:[{_CJK}]|[^\W{_CJK}]{{1,5}}|\S)|\s+")

# Chat-format overhead per message and for priming the reply (OpenAI's cookbook counts 3 + 3).
_PER_MESSAGE_TOKENS = 3
_REPLY_PRIMING_TOKENS = 3


def split_tokens(text: str) -> list[str]:
    """The token pieces of ``text``; ``"".join(split_tokens(t)) == t``."""
    return _TOKEN.findall(text)


def count_tokens(text: str) -> int:
    """Approximate token count: CJK chars count 1 each, latin words ~1.3 each."""
    return len(_TOKEN.findall(text))


@dataclass(frozen=True, slots=True)
class Prompt:
    """What an answer source sees of a chat request."""

    text: str  # every message's text, one per line
    last_user: str  # the last user message: the question a quality model looks up
    tokens: int  # prompt tokens as reported in usage

    @classmethod
    def from_contents(cls, contents: list[tuple[str, str]]) -> Prompt:
        """Build from ``(role, text)`` pairs in conversation order."""
        text = "\n".join(content for _, content in contents)
        last_user = next((c for role, c in reversed(contents) if role == "user"), "")
        tokens = sum(count_tokens(c) + _PER_MESSAGE_TOKENS for _, c in contents)
        return cls(text=text, last_user=last_user, tokens=tokens + _REPLY_PRIMING_TOKENS)


class AnswerSource(Protocol):
    """Writes the full (uncapped) answer a model gives to a prompt; must be deterministic."""

    def answer(self, prompt: Prompt, model: str) -> str: ...


def stable_hash(*parts: str) -> int:
    """A 64-bit hash that, unlike ``hash()``, is the same in every process."""
    digest = hashlib.blake2b("\x00".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


_VOCABULARY = (
    "the answer is that a system uses one simple rule for each request and then checks "
    "whether result matches expected value in document policy guide section table where "
    "configuration lists default option account balance customer service ticket refund "
    "order shipping status invoice payment method contract clause summary definition means "
    "process step should could would first second finally because therefore however also "
    "model latency budget cache route queue token batch memory limit error retry timeout"
)
_WORDS = tuple(_VOCABULARY.split())


class PseudoAnswers:
    """Pseudo-word answers, prefixed ``[model]`` so a reader can tell who answered."""

    def __init__(self, min_tokens: int, max_tokens: int) -> None:
        if not 1 <= min_tokens <= max_tokens:
            raise ValueError("need 1 <= min_tokens <= max_tokens")
        self._min = min_tokens
        self._span = max_tokens - min_tokens + 1

    def target_tokens(self, prompt: Prompt) -> int:
        """The natural answer length: uniform over the range, fixed by the prompt text."""
        return self._min + stable_hash(prompt.text) % self._span

    def answer(self, prompt: Prompt, model: str) -> str:
        target = self.target_tokens(prompt)
        rng = random.Random(stable_hash(model, prompt.text))
        pieces = split_tokens(f"[{model}]")
        while len(pieces) < target - 1:
            pieces.extend(split_tokens(" " + rng.choice(_WORDS)))
        # end on a full stop; cutting at a piece boundary keeps the count exact on re-splitting
        return "".join(pieces[: target - 1]) + "."
