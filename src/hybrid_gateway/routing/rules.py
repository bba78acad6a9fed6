"""Explainable routing rules: the first rule whose conditions all hold decides.

Rules look at the last user message (its text, length, code blocks, keywords), the conversation
depth, attachments and the declared document type, and the tenant.  A matching rule either
names a lane or, with ``action: classifier``, hands the request to the learned stages (skipping
the rules after it).  Every decision names what made it: the rule's name, ``model:<id>`` when
the client asked for a lane's model directly (``routing/router.py``), or ``default``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from hybrid_gateway.routing.settings import RuleCondition, RuleConfig
from hybrid_gateway.types import RouteDecision

# Content part types that carry something other than text.
ATTACHMENT_TYPES = frozenset({"image_url", "input_image", "file", "input_file", "input_audio"})


@dataclass(frozen=True, slots=True)
class RequestFeatures:
    """Cheap facts about a request, computed once and shared by every rule."""

    text: str  # last user message, lower-cased
    chars: int
    has_code_block: bool
    user_turns: int
    question: str = ""  # last user message as sent (the learned stages read this)
    has_attachment: bool = False
    document_types: frozenset[str] = frozenset()
    metadata: Mapping[str, Any] | None = None


class PassOn:
    """A rule matched and asked for the learned stages (``action: classifier``)."""

    __slots__ = ("rule",)

    def __init__(self, rule: str) -> None:
        self.rule = rule


def message_text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _attachments(content: Any) -> tuple[bool, set[str]]:
    """Whether ``content`` has non-text parts, and the extensions of attached file names."""
    if not isinstance(content, list):
        return False, set()
    found, kinds = False, set()
    for part in content:
        if not isinstance(part, dict) or part.get("type") not in ATTACHMENT_TYPES:
            continue
        found = True
        file = part.get("file") if isinstance(part.get("file"), dict) else part
        name = file.get("filename") if isinstance(file, dict) else None
        if isinstance(name, str) and "." in name:
            kinds.add(name.rsplit(".", 1)[1].lower())
    return found, kinds


def extract_features(
    messages: Sequence[Mapping[str, Any]], metadata: Mapping[str, Any] | None = None
) -> RequestFeatures:
    last_user = ""
    user_turns = 0
    has_attachment = False
    kinds: set[str] = set()
    for message in messages:
        if message.get("role") == "user":
            user_turns += 1
            content = message.get("content")
            last_user = message_text(content)
            found, exts = _attachments(content)
            has_attachment |= found
            kinds |= exts
    declared = metadata.get("document_type") if metadata else None
    if isinstance(declared, str) and declared:
        kinds.add(declared.lower().lstrip("."))
    return RequestFeatures(
        text=last_user.lower(),
        chars=len(last_user),
        has_code_block="```" in last_user,
        user_turns=user_turns,
        question=last_user,
        has_attachment=has_attachment,
        document_types=frozenset(kinds),
        metadata=metadata,
    )


_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")


def _has_numbers(text: str, least: int) -> bool:
    """``text`` has at least ``least`` numbers (read only as far as needed)."""
    return any(seen >= least for seen, _ in enumerate(_NUMBER.finditer(text), start=1))


def _holds(when: RuleCondition, f: RequestFeatures, tenant: str) -> bool:
    checks = (
        not when.tenants or tenant in when.tenants,
        not when.keywords_any or any(k.lower() in f.text for k in when.keywords_any),
        when.max_chars is None or f.chars <= when.max_chars,
        when.min_chars is None or f.chars >= when.min_chars,
        when.has_code_block is None or f.has_code_block == when.has_code_block,
        when.max_user_turns is None or f.user_turns <= when.max_user_turns,
        when.min_user_turns is None or f.user_turns >= when.min_user_turns,
        when.min_numbers is None or _has_numbers(f.question, when.min_numbers),
        when.has_attachment is None or f.has_attachment == when.has_attachment,
        not when.document_types or any(d.lower() in f.document_types for d in when.document_types),
    )
    return all(checks)


class RuleBook:
    """The rules, in order; decisions are values fixed by the config, built once."""

    def __init__(self, rules: Sequence[RuleConfig], lane_channels: Mapping[str, str]) -> None:
        self._rules: Final = tuple(
            (
                rule.when,
                RouteDecision(rule.lane, lane_channels[rule.lane], rule.name)
                if rule.lane is not None
                else PassOn(rule.name),
            )
            for rule in rules
        )

    def match(self, features: RequestFeatures, tenant: str) -> RouteDecision | PassOn | None:
        """The first matching rule's decision (or hand-over); None when no rule matches."""
        for when, outcome in self._rules:
            if _holds(when, features, tenant):
                return outcome
        return None
