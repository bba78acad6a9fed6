"""What the request log keeps of a prompt: nothing, a hash, a redacted text or the full text.

``server.request_log.prompts`` picks the mode; ``none`` (the default) stores nothing, as before.
Only the last user message is kept: it is the question the route and cache decisions were made
for, and the misroute review needs no more than that.

- ``hash``: the SHA-256 hex digest of the text, enough to group repeated questions and to match a
  prompt a user reports without the log holding what they wrote.
- ``redacted``: the text with e-mail addresses, phone numbers, long digit runs and ids (the
  semantic cache's noise patterns: UUIDs, prefixed ids, hex tokens, timestamps) masked.  A
  pattern filter, not a guarantee: names and free-text secrets stay.
- ``full``: the text as sent.

The stored form is computed once on the request path (``note_prompt``) and carried in
``record.extra`` so the log's row builder stays a plain field copy.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from hybrid_gateway.cache.semantic.hygiene import DEFAULT_NOISE, TIMESTAMP_NOISE
from hybrid_gateway.routing.rules import message_text
from hybrid_gateway.types import RequestRecord

PromptMode = Literal["none", "hash", "redacted", "full"]

PROMPT_KEY = "prompt"  # the record.extra key the row builder reads
MASK = "[redacted]"

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
# Phone-like: an optional +country code, then digits in groups split by space, dot, dash or
# parentheses; masked only with 7+ digits and when it is not a date (``_phone``).
_PHONE = re.compile(r"(?<![\w+])\+?\(?\d[\d\s().-]{5,}\d(?!\w)")
_DATE = re.compile(r"\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{4}")
_DIGITS = re.compile(r"\d{6,}")  # what is left: account, card and order numbers
_NOISE = tuple(re.compile(p, re.IGNORECASE) for p in (*TIMESTAMP_NOISE, *DEFAULT_NOISE))


def _phone(match: re.Match[str]) -> str:
    found = match.group(0)
    if _DATE.fullmatch(found.strip()) or sum(c.isdigit() for c in found) < 7:
        return found
    return MASK


def redact(text: str) -> str:
    """``text`` with personal data and ids replaced by ``[redacted]``."""
    text = _EMAIL.sub(MASK, text)
    for pattern in _NOISE:  # ids and timestamps first: they would otherwise read as phones
        text = pattern.sub(MASK, text)
    text = _PHONE.sub(_phone, text)
    return _DIGITS.sub(MASK, text)


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The text of the last user message; None when there is none."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return message_text(message.get("content"))
    return None


def stored_prompt(mode: PromptMode, messages: Sequence[Mapping[str, Any]]) -> str | None:
    """What the ``prompt`` column keeps for these messages under ``mode``."""
    if mode == "none":
        return None
    text = last_user_text(messages)
    if text is None:
        return None
    if mode == "hash":
        return hashlib.sha256(text.encode()).hexdigest()
    if mode == "redacted":
        return redact(text)
    return text


def note_prompt(
    mode: PromptMode, messages: Sequence[Mapping[str, Any]], record: RequestRecord
) -> None:
    """Put the stored form on ``record`` for the request log (nothing in mode ``none``)."""
    stored = stored_prompt(mode, messages)
    if stored is not None:
        record.extra[PROMPT_KEY] = stored
