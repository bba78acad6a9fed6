"""What the semantic cache embeds and what it partitions by: cache-key hygiene.

A cached answer may serve a new request only if everything that shapes the answer, other than
the wording of the question, is the same.  So a request splits into

    question   the last user message, with non-semantic noise stripped: this is embedded, and
               paraphrases of it are what the cache is for
    bucket     a digest of the model id asked for, the conversation context (system prompt and
               every earlier turn, noise stripped) and the parameters that change the answer
               (``pipeline/key.py``: temperature, tools, response format, ...): only entries
               in the same bucket are ever compared

so "how old is she?" after two different conversations lands in two buckets and never
collides, and a request at temperature 0.2 never receives an answer made at 1.0.

Noise is what clients inject that says nothing about the question: UUIDs, long hex ids,
request ids, timestamps with a time of day, and operator-listed user names ("Hi, I'm Alice").
Bare dates stay: "is the office open on 2025-05-01" is a different question from another day.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from hybrid_gateway.pipeline.key import ANSWER_PARAMS, request_key
from hybrid_gateway.routing.rules import message_text
from hybrid_gateway.types import ChatRequest

DEFAULT_NOISE: tuple[str, ...] = (
    # UUIDs
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
    # prefixed ids: req_..., msg-..., user_... (letters + separator + 6+ id characters)
    r"\b(?:req|msg|user|session|sess|trace|chatcmpl|conv|uid|id)[_-][A-Za-z0-9]{6,}\b",
    # long hex tokens (hashes, object ids)
    r"\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{16,}\b",
    # timestamps with a time of day (ISO 8601 and the common log forms)
    r"\b\d{4}[-/]\d{1,2}[-/]\d{1,2}"
    r"(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)\b",
    r"\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b",
    # Unix epoch seconds / milliseconds (10 or 13 digits)
    r"\b1\d{9}(?:\d{3})?\b",
)
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class SemanticKey:
    question: str  # embedded
    bucket: str  # compared only within


class NoiseStripper:
    """Removes configured noise; names are matched as whole words, case-insensitively."""

    def __init__(self, patterns: Sequence[str] = DEFAULT_NOISE, user_names: Sequence[str] = ()):
        self._noise = [re.compile(p, re.IGNORECASE) for p in patterns]
        if user_names:
            names = "|".join(re.escape(n) for n in sorted(user_names, key=len, reverse=True))
            self._noise.append(re.compile(rf"(?<!\w)(?:{names})(?!\w)", re.IGNORECASE))

    def strip(self, text: str) -> str:
        for pattern in self._noise:
            text = pattern.sub(" ", text)
        return _SPACE.sub(" ", text).strip()


def semantic_key(request: ChatRequest, stripper: NoiseStripper) -> SemanticKey | None:
    """The question and its bucket; None when the request has no user question to match."""
    messages = list(request.messages)
    if not messages or messages[-1].get("role") != "user":
        return None
    question = stripper.strip(message_text(messages[-1].get("content")))
    if not question:
        return None
    context = [_clean(m, stripper) for m in messages[:-1]]
    params = {k: v for k, v in request.body.items() if k in ANSWER_PARAMS}
    # request_key canonicalises the params (defaults dropped, 1 == 1.0) the same way the exact
    # cache does; the context joins as a system-role message list it never sees otherwise.
    shaped = ChatRequest(
        model=request.model,
        messages=[{"role": "context", "content": _digest(context)}],
        stream=False,
        include_usage=False,
        body=params,
    )
    return SemanticKey(question=question, bucket=request_key(shaped, "semantic"))


def _clean(message: Mapping[str, Any], stripper: NoiseStripper) -> list[Any]:
    return [
        message.get("role"),
        stripper.strip(message_text(message.get("content"))),
        message.get("tool_calls"),
        message.get("tool_call_id"),
    ]


def _digest(value: object) -> str:
    payload = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(payload, digest_size=16).hexdigest()
