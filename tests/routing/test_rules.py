from __future__ import annotations

from typing import Any

from hybrid_gateway.api.schema import parse_chat_request
from hybrid_gateway.config import load_config
from hybrid_gateway.routing.rules import RuleRouter, extract_features
from tests.test_config import EXAMPLE


def router() -> RuleRouter:
    config = load_config(EXAMPLE)
    return RuleRouter(
        rules=config.routing.rules,
        default_lane=config.routing.default_lane,
        lane_channels={n: lane.channel for n, lane in config.lanes.items()},
        model_lanes={m.id: m.lane for m in config.models},
    )


def route(content: Any, model: str = "auto", history: int = 0) -> tuple[str, str]:
    messages = [{"role": "user", "content": f"earlier {i}"} for i in range(history)]
    messages.append({"role": "user", "content": content})
    decision = router().route(parse_chat_request({"model": model, "messages": messages}))
    return decision.lane, decision.rule


def test_keyword_whitelist_in_chinese_and_english() -> None:
    long_tail = " 请详细说明一下步骤和注意事项" * 3
    assert route("这个接口怎么调用" + long_tail) == ("light", "how-to-keywords")
    assert route("How do I install the CLI on a Debian server with no internet access at all?") == (
        "light",
        "how-to-keywords",
    )


def test_rules_are_ordered_first_match_wins() -> None:
    assert route("```python\nprint(1)\n```\n怎么调用") == ("heavy", "code-goes-heavy")


def test_short_single_turn_and_default() -> None:
    assert route("什么是向量数据库?") == ("light", "short-single-turn")
    assert route("什么是向量数据库?", history=2)[1] == "default"
    assert route(
        "Explain how this API's authentication works end to end, with the threat model "
        "and the trade-offs between tokens and mutual TLS."
    ) == ("heavy", "default")
    assert route("x" * 500) == ("heavy", "long-question")


def test_model_forces_lane_and_is_named() -> None:
    assert route("x" * 500, model="light") == ("light", "model:light")


def test_content_parts_are_read() -> None:
    features = extract_features(
        [{"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "image_url"}]}]
    )
    assert features.text == "hello" and features.chars == 5 and features.user_turns == 1
