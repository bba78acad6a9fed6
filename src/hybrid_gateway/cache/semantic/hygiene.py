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
request ids and operator-listed user names ("Hi, I'm Alice"), everywhere; clock readings
(timestamps with a time of day, epoch seconds) only from system and developer messages, where
clients inject "now" (configurable: ``strip_timestamps``).  Numbers, dates and times in the
user's own words stay: "convert 1700000000 to a date" or "is the office open on 2025-05-01"
is a different question with another number.  Attachments (images, files, audio) are never
embedded; they go into the bucket as sent, so the same words about another picture or
document never meet.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from hybrid_gateway.pipeline.key import ANSWER_PARAMS, request_key
from hybrid_gateway.routing.rules import message_text
from hybrid_gateway.types import ChatRequest

DEFAULT_NOISE: tuple[str, ...] = (
    # UUIDs
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
    # prefixed ids: req_..., msg-..., user_8f3k2j (a prefix, a separator and 6+ id characters,
    # one of them a digit: "user-friendly" is a word)
    r"\b(?:req|msg|user|session|sess|trace|chatcmpl|conv|uid|id)[_-]"
    r"(?=[A-Za-z]*\d)[A-Za-z0-9]{6,}\b",
    # long hex tokens (hashes, object ids) with a letter and a digit: a run of 16+ decimal
    # digits is a card, account or plain number, and may be the question
    r"\b(?=[0-9a-fA-F]*\d)(?=\d*[a-fA-F])[0-9a-fA-F]{16,}\b",
)
# Clock readings: where a client injects them (the system prompt: "Now: 2025-03-01 10:22:33")
# they split every conversation into its own bucket; in a question ("what weekday was
# 2024-03-01 09:00?", "convert 1700000000 to a date") they are the question.  Stripped from
# system and developer messages by default (``strip_timestamps: system``), not from user turns.
TIMESTAMP_NOISE: tuple[str, ...] = (
    # timestamps with a time of day (ISO 8601 and the common log forms)
    r"\b\d{4}[-/]\d{1,2}[-/]\d{1,2}"
    r"(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)\b",
    r"\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b",
    # Unix epoch seconds / milliseconds (10 or 13 digits)
    r"\b1\d{9}(?:\d{3})?\b",
)
TimestampScope = Literal["none", "system", "all"]
_SYSTEM_ROLES = frozenset({"system", "developer"})

# What a built-in pattern cannot match without, checked before its scan: a UUID has a '-' right
# after 8 hex characters; a prefixed id one of its prefixes right before a '-' or '_'; a hex
# token, a timestamp or an epoch a decimal digit (ASCII or not, as ``\d`` reads it).  The
# checks look at the separators with ``str.find`` (about 1 us for 2,000 characters, where the
# patterns' scans cost 64-152 us) and say "maybe" whenever they cannot be sure: after
# ``_LOOKS`` separators (a text of dashes), and for a prefix window that is not ASCII (under
# IGNORECASE "ſ" is an "s" and "ı" an "i"; no other character reads as a hex digit).
# Operator patterns are always scanned.
_HEX = frozenset("0123456789abcdefABCDEF")
_ID_PREFIXES = ("req", "msg", "user", "session", "sess", "trace", "chatcmpl", "conv", "uid", "id")
_LOOKS = 64
_ANY_DIGIT = re.compile(r"\d")


def _may_hold_uuid(text: str) -> bool:
    i, looked = text.find("-"), 0
    while i != -1:
        if i >= 8 and _HEX.issuperset(text[i - 8 : i]):
            return True
        looked += 1
        if looked == _LOOKS:
            return True
        i = text.find("-", i + 1)
    return False


def _may_hold_prefixed_id(text: str) -> bool:
    looked = 0
    for separator in "-_":
        i = text.find(separator)
        while i != -1:
            window = text[max(0, i - 8) : i]
            if not window.isascii() or window.lower().endswith(_ID_PREFIXES):
                return True
            looked += 1
            if looked == _LOOKS:
                return True
            i = text.find(separator, i + 1)
    return False


def _has_digit(text: str) -> bool:
    if any(digit in text for digit in "0123456789"):
        return True
    return not text.isascii() and _ANY_DIGIT.search(text) is not None


_MAY_MATCH: dict[str, Callable[[str], bool]] = {
    DEFAULT_NOISE[0]: _may_hold_uuid,
    DEFAULT_NOISE[1]: _may_hold_prefixed_id,
    DEFAULT_NOISE[2]: _has_digit,
    **dict.fromkeys(TIMESTAMP_NOISE, _has_digit),
}
_Noise = list[tuple[re.Pattern[str], Callable[[str], bool] | None]]


@dataclass(frozen=True, slots=True)
class SemanticKey:
    question: str  # embedded
    bucket: str  # compared only within


class NoiseStripper:
    """Removes configured noise; names are matched as whole words, case-insensitively.

    ``patterns`` and ``user_names`` go everywhere; the clock readings of ``TIMESTAMP_NOISE``
    only from system/developer messages (``timestamps="system"``), everywhere, or nowhere.
    """

    def __init__(
        self,
        patterns: Sequence[str] = DEFAULT_NOISE,
        user_names: Sequence[str] = (),
        timestamps: TimestampScope = "system",
    ) -> None:
        self._noise: _Noise = [(re.compile(p, re.IGNORECASE), _MAY_MATCH.get(p)) for p in patterns]
        if user_names:
            names = "|".join(re.escape(n) for n in sorted(user_names, key=len, reverse=True))
            self._noise.append((re.compile(rf"(?<!\w)(?:{names})(?!\w)", re.IGNORECASE), None))
        self._clock: _Noise = [(re.compile(p, re.IGNORECASE), _has_digit) for p in TIMESTAMP_NOISE]
        self._timestamps = timestamps

    def strip(self, text: str, *, system: bool = False) -> str:
        """``text`` without noise; ``system``: it is a system or developer message.

        Runs of whitespace become one space, ends trimmed: ``str.split`` splits on the same
        characters as ``\\s`` (a test holds the two ways equal), at a fifth of a regex's cost.
        """
        noise = self._noise
        if self._timestamps == "all" or (system and self._timestamps == "system"):
            noise = self._clock + noise  # the clock first: a date is not a hex token
        for pattern, may_match in noise:
            if may_match is None or may_match(text):
                text = pattern.sub(" ", text)
        return " ".join(text.split())


def semantic_key(request: ChatRequest, stripper: NoiseStripper) -> SemanticKey | None:
    """The question and its bucket; None when the request has no user question to match."""
    messages = list(request.messages)
    if not messages or messages[-1].get("role") != "user":
        return None
    question = stripper.strip(message_text(messages[-1].get("content")))
    if not question:
        return None
    calls = _CallIds()
    context = [_clean(m, stripper, calls) for m in messages[:-1]]
    # what the question carries besides its text (images, files, audio) shapes the answer:
    # "summarize the attached document" with another document is another question
    # (appended only when present: the buckets of plain text stay what they were)
    attached = _attachments(messages[-1].get("content"))
    if attached:
        context.append(["attached", attached])
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


class _CallIds:
    """Tool-call ids are random per call: the context keeps their order of first appearance,
    so the same tool exchange in two conversations fingerprints alike."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    def __call__(self, call_id: object) -> object:
        if not isinstance(call_id, str):
            return call_id
        return f"call-{self._seen.setdefault(call_id, len(self._seen))}"


def _clean(message: Mapping[str, Any], stripper: NoiseStripper, calls: _CallIds) -> list[Any]:
    role = message.get("role")
    content = message.get("content")
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list):
        tool_calls = [
            {**call, "id": calls(call.get("id"))} if isinstance(call, dict) else call
            for call in tool_calls
        ]
    cleaned = [
        role,
        stripper.strip(message_text(content), system=role in _SYSTEM_ROLES),
        tool_calls,
        calls(message.get("tool_call_id")),
    ]
    # more only when present, so the buckets of plain text turns stay what they were
    extra = {"attached": _attachments(content), "name": message.get("name"),
             "function_call": message.get("function_call")}  # fmt: skip
    return cleaned + [[k, v] for k, v in extra.items() if v]


def _attachments(content: Any) -> list[Any]:
    """The non-text parts of a message's content (images, files, audio), as sent."""
    if not isinstance(content, list):
        return []
    return [part for part in content if not (isinstance(part, dict) and part.get("type") == "text")]


def _digest(value: object) -> str:
    payload = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(payload, digest_size=16).hexdigest()


def uncacheable_question(
    patterns: Sequence[re.Pattern[str]], request: ChatRequest, key: SemanticKey | None = None
) -> bool:
    """Does the last user message match one of ``patterns``, as sent (or as ``key`` has it,
    noise-stripped)?"""
    if not patterns or not request.messages:
        return False
    last = request.messages[-1]
    if last.get("role") != "user":
        return False
    texts = [message_text(last.get("content"))]
    if key is not None:
        texts.append(key.question)
    return any(p.search(text) for p in patterns for text in texts)


def compile_uncacheable(patterns: Sequence[str]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, re.IGNORECASE) for p in patterns)
