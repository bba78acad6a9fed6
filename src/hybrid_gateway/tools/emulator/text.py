"""Deterministic answer text, counted with the shared approximate tokenizer.

The tokenizer (``accounting/tokens.py``) splits text into pieces that concatenate back to the
text exactly.  Streaming sends one piece per chunk, and ``count_tokens`` is the number of pieces,
so usage and chunk counts always agree.

Answers come from an ``AnswerSource``.  The default, ``PseudoAnswers``, writes pseudo words
seeded by a hash of the prompt and model, with a length picked from the profile's range by a hash
of the prompt alone; a quality model (does the light/heavy model answer this item correctly?)
plugs in as another ``AnswerSource`` without touching the engine or server.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Protocol

from hybrid_gateway.accounting.tokens import count_prompt_tokens, split_tokens


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
        tokens = count_prompt_tokens(c for _, c in contents)
        return cls(text=text, last_user=last_user, tokens=tokens)


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
WORDS = tuple(_VOCABULARY.split())


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
            pieces.extend(split_tokens(" " + rng.choice(WORDS)))
        # end on a full stop; cutting at a piece boundary keeps the count exact on re-splitting
        return "".join(pieces[: target - 1]) + "."
