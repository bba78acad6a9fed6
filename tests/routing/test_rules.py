from __future__ import annotations

from typing import Any

from hybrid_gateway.api.schema import parse_chat_request
from hybrid_gateway.config import load_config, parse_config
from hybrid_gateway.routing.build import build_router
from hybrid_gateway.routing.router import GatewayRouter
from hybrid_gateway.routing.rules import extract_features
from hybrid_gateway.types import RequestRecord
from tests.test_config import EXAMPLE, minimal


def example_router() -> GatewayRouter:
    return build_router(load_config(EXAMPLE), config_path=EXAMPLE, embedder=None)


async def route(
    content: Any,
    model: str = "auto",
    history: int = 0,
    *,
    router: GatewayRouter | None = None,
    tenant: str = "default",
    metadata: dict[str, Any] | None = None,
) -> tuple[str, str]:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": f"earlier {i}"} for i in range(history)
    ]
    messages.append({"role": "user", "content": content})
    body: dict[str, Any] = {"model": model, "messages": messages}
    if metadata is not None:
        body["metadata"] = metadata
    record = RequestRecord(request_id="r", started_at=0.0, tenant=tenant)
    decision = await (router or example_router()).route(parse_chat_request(body), record)
    return decision.lane, decision.rule


async def test_keyword_whitelist_in_chinese_and_english() -> None:
    long_tail = " 请详细说明一下步骤和注意事项" * 3
    assert await route("这个接口怎么调用" + long_tail) == ("light", "how-to-keywords")
    assert await route(
        "How do I install the CLI on a Debian server with no internet access at all?"
    ) == ("light", "how-to-keywords")


async def test_rules_are_ordered_first_match_wins() -> None:
    assert await route("```python\nprint(1)\n```\n怎么调用") == ("heavy", "code-goes-heavy")


async def test_short_single_turn_and_default() -> None:
    assert await route("什么是向量数据库?") == ("light", "short-single-turn")
    assert (await route("什么是向量数据库?", history=2))[1] == "default"
    assert await route(
        "Explain how this API's authentication works end to end, with the threat model "
        "and the trade-offs between tokens and mutual TLS."
    ) == ("heavy", "default")
    assert await route("x" * 500) == ("heavy", "long-question")


async def test_model_forces_lane_and_is_named() -> None:
    assert await route("x" * 500, model="light") == ("light", "model:light")


def test_content_parts_are_read() -> None:
    features = extract_features(
        [{"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "image_url"}]}]
    )
    assert features.text == "hello" and features.chars == 5 and features.user_turns == 1
    assert features.has_attachment


def rules_router(rules: list[dict[str, Any]]) -> GatewayRouter:
    config = parse_config(minimal(routing={"default_lane": "heavy", "rules": rules}))
    return build_router(config, config_path=None, embedder=None)


async def test_attachments_and_document_types() -> None:
    router = rules_router([
        {"name": "pdf-heavy", "when": {"document_types": ["pdf"]}, "lane": "heavy"},
        {"name": "images-light", "when": {"has_attachment": True}, "lane": "light"},
        {"name": "anything", "when": {"min_chars": 1}, "lane": "light"},
    ])  # fmt: skip
    image = [{"type": "text", "text": "what is this?"},
             {"type": "image_url", "image_url": {"url": "data:,"}}]  # fmt: skip
    pdf = [{"type": "text", "text": "summarise"},
           {"type": "file", "file": {"filename": "Report.PDF", "file_data": "x"}}]  # fmt: skip
    assert await route(image, router=router) == ("light", "images-light")
    assert await route(pdf, router=router) == ("heavy", "pdf-heavy")
    declared = await route("summarise it", router=router, metadata={"document_type": "pdf"})
    assert declared == ("heavy", "pdf-heavy")
    assert await route("plain", router=router) == ("light", "anything")


async def test_per_tenant_forced_tier() -> None:
    router = rules_router([
        {"name": "vip-heavy", "when": {"tenants": ["vip"]}, "lane": "heavy"},
        {"name": "short-light", "when": {"max_chars": 100}, "lane": "light"},
    ])  # fmt: skip
    assert await route("hi", router=router, tenant="vip") == ("heavy", "vip-heavy")
    assert await route("hi", router=router, tenant="other") == ("light", "short-light")


async def test_min_numbers_sends_a_short_calculation_on_before_the_short_rule() -> None:
    config = load_config(EXAMPLE).model_dump(mode="json")
    numbers = {"name": "numbers", "when": {"min_numbers": 2, "max_chars": 400}, "lane": "heavy"}
    config["routing"]["rules"].insert(0, numbers)
    router = build_router(parse_config(config), config_path=EXAMPLE, embedder=None)
    for question in ("一种衣服打九折出售，每件卖45元，3件多少元？", "What is 192 / 24.5?",
                     "借13000分20期还每月还多少", "1,000 or 2?"):  # fmt: skip
        assert await route(question, router=router) == ("heavy", "numbers")
    # one number ("3.5" and "1,000" are one each) is not a calculation
    for question in ("26号什么时候扣款", "什么是向量数据库?", "What is 3.5?", "Is 1,000 a lot?"):
        assert await route(question, router=router) == ("light", "short-single-turn")
