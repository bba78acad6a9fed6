"""Explainable routing rules: the first rule whose conditions all hold picks the lane.

Rules look at the last user message (its text, length, code blocks, keywords) and the
conversation depth.  A decision always names what made it: ``model:<id>`` when the client asked
for a lane's model directly, the rule's name, or ``default`` when no rule matched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hybrid_gateway.config import RuleCondition, RuleConfig
from hybrid_gateway.types import ChatRequest, RouteDecision


@dataclass(frozen=True, slots=True)
class RequestFeatures:
    """Cheap text features of a request, computed once and shared by every rule."""

    text: str  # last user message, lower-cased
    chars: int
    has_code_block: bool
    user_turns: int


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


def extract_features(messages: Sequence[Mapping[str, Any]]) -> RequestFeatures:
    last_user = ""
    user_turns = 0
    for message in messages:
        if message.get("role") == "user":
            user_turns += 1
            last_user = message_text(message.get("content"))
    return RequestFeatures(
        text=last_user.lower(),
        chars=len(last_user),
        has_code_block="```" in last_user,
        user_turns=user_turns,
    )


def _holds(when: RuleCondition, f: RequestFeatures) -> bool:
    checks = (
        not when.keywords_any or any(k.lower() in f.text for k in when.keywords_any),
        when.max_chars is None or f.chars <= when.max_chars,
        when.min_chars is None or f.chars >= when.min_chars,
        when.has_code_block is None or f.has_code_block == when.has_code_block,
        when.max_user_turns is None or f.user_turns <= when.max_user_turns,
        when.min_user_turns is None or f.user_turns >= when.min_user_turns,
    )
    return all(checks)


class RuleRouter:
    """Rules first, in order; the default lane when none matches."""

    def __init__(
        self,
        *,
        rules: Sequence[RuleConfig],
        default_lane: str,
        lane_channels: Mapping[str, str],
        model_lanes: Mapping[str, str | None],
    ) -> None:
        def decision(lane: str, rule: str) -> RouteDecision:
            return RouteDecision(lane=lane, channel=lane_channels[lane], rule=rule)

        # Decisions are values fixed by the config: build each once, not once per request.
        self._rules = tuple((rule.when, decision(rule.lane, rule.name)) for rule in rules)
        self._default = decision(default_lane, "default")
        self._forced = {
            model: decision(lane, f"model:{model}")
            for model, lane in model_lanes.items()
            if lane is not None
        }

    def route(self, request: ChatRequest) -> RouteDecision:
        forced = self._forced.get(request.model)
        if forced is not None:
            return forced
        features = extract_features(request.messages)
        for when, decision in self._rules:
            if _holds(when, features):
                return decision
        return self._default
