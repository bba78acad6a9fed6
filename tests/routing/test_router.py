from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hybrid_gateway.api.schema import parse_chat_request
from hybrid_gateway.config import parse_config
from hybrid_gateway.embedding.base import Vector
from hybrid_gateway.embedding.http import EmbeddingServiceError
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.routing.build import build_router
from hybrid_gateway.routing.exemplars import load_exemplars
from hybrid_gateway.routing.router import GatewayRouter
from hybrid_gateway.types import RequestRecord, RouteDecision
from tests.routing.fakes import WordHashEmbedder, with_embedding
from tests.routing.helpers import trained_model
from tests.test_config import minimal

EXEMPLARS = """
default:
  simple: ["how do i install the client", "where do i set the password"]
  complex: ["prove the theorem about prime ideals", "derive the bound on the error rigorously"]
acme:
  simple: ["prove the theorem about prime ideals"]
  complex: ["how do i install the client"]
"""


def router_for(tmp_path: Path, embedder: WordHashEmbedder, **routing: Any) -> GatewayRouter:
    trained_model(embedder, tmp_path / "m.npz")
    (tmp_path / "exemplars.yaml").write_text(EXEMPLARS)
    routing = {"classifier": {"model": "m.npz", "threshold": 0.7}, **routing}
    config_path = tmp_path / "gw.yaml"
    return build_router(parse_config(minimal(routing=routing)), config_path=config_path,
                        embedder=embedder)  # fmt: skip


async def decide(
    router: GatewayRouter,
    embedder: WordHashEmbedder,
    text: str,
    *,
    tenant: str = "default",
    metadata: dict[str, Any] | None = None,
    embed: bool = True,
) -> RouteDecision:
    body: dict[str, Any] = {"model": "auto", "messages": [{"role": "user", "content": text}]}
    if metadata:
        body["metadata"] = metadata
    record = with_embedding(RequestRecord("r", 0.0, tenant=tenant), embedder, text)
    return await router.route(parse_chat_request(body), record, embed=embed)


HARD = "prove the theorem about prime ideals in ring number 99 rigorously"
EASY = "how do i install the client on laptop number 99"


async def test_classifier_decision_records_score_and_threshold(tmp_path: Path) -> None:
    embedder = WordHashEmbedder()
    router = router_for(tmp_path, embedder)
    hard = await decide(router, embedder, HARD)
    easy = await decide(router, embedder, EASY)
    assert (hard.lane, hard.rule, hard.threshold) == ("heavy", "classifier", 0.7)
    assert (easy.lane, easy.rule) == ("light", "classifier")
    assert hard.score is not None and easy.score is not None and hard.score > 0.7 > easy.score
    assert hard.header().endswith(f"rule=classifier; score={hard.score:.3f}; threshold=0.700")


async def test_rules_first_and_pass_on_to_the_classifier(tmp_path: Path) -> None:
    embedder = WordHashEmbedder()
    rules = [
        {"name": "ask-classifier", "when": {"keywords_any": ["theorem"]}, "action": "classifier"},
        {"name": "short-light", "when": {"max_chars": 200}, "lane": "light"},
    ]
    router = router_for(tmp_path, embedder, rules=rules)
    assert (await decide(router, embedder, HARD)).rule == "classifier"
    calls = embedder.calls
    assert (await decide(router, embedder, EASY)).rule == "short-light"
    assert embedder.calls == calls  # a rule decision never pays for an embedding


async def test_exemplars_per_tenant_with_a_margin(tmp_path: Path) -> None:
    embedder = WordHashEmbedder()
    router = router_for(tmp_path, embedder, exemplars={"path": "exemplars.yaml", "margin": 0.1})
    near_complex = await decide(router, embedder, "prove the theorem about prime ideals")
    assert (near_complex.lane, near_complex.rule) == ("heavy", "exemplars:default")
    assert near_complex.score is not None and near_complex.score >= 0.1
    # acme's set says the opposite
    acme = await decide(router, embedder, "prove the theorem about prime ideals", tenant="acme")
    assert (acme.lane, acme.rule) == ("light", "exemplars:acme")
    # far from every exemplar: within the margin -> passed on to the classifier
    unclear = await decide(router, embedder, "weather today")
    assert unclear.rule == "classifier"


async def test_category_gates_send_to_heavy(tmp_path: Path) -> None:
    embedder = WordHashEmbedder()
    router = router_for(tmp_path, embedder, gates={"heavy_categories": ["legal"]})
    gated = await decide(router, embedder, EASY, metadata={"category": "legal"})
    assert (gated.lane, gated.rule) == ("heavy", "gate:legal")
    assert (await decide(router, embedder, EASY, metadata={"category": "faq"})).lane == "light"


async def test_without_embedding_the_learned_stage_is_skipped(tmp_path: Path) -> None:
    embedder = WordHashEmbedder()
    router = router_for(tmp_path, embedder)
    decision = await decide(router, embedder, HARD, embed=False)
    assert decision.rule == "default"
    assert embedder.calls == 30 * 2  # only the training texts


class DownEmbedder(WordHashEmbedder):
    """Trains like the word-hash embedder, then its service goes down."""

    down = False

    async def embed_one(self, text: str) -> Vector:
        if self.down:
            raise EmbeddingServiceError("embedding service http://127.0.0.1:9/v1: refused")
        return await super().embed_one(text)


async def test_an_embedder_outage_routes_to_the_default_lane(tmp_path: Path) -> None:
    embedder = DownEmbedder()
    router = router_for(tmp_path, embedder)
    embedder.down = True
    body = {"model": "auto", "messages": [{"role": "user", "content": HARD}]}
    record = with_embedding(RequestRecord("r", 0.0), embedder, HARD)
    decision = await router.route(parse_chat_request(body), record)
    assert decision.rule == "default:learned_unavailable"  # the default lane of minimal()
    assert record.extra["route_error"] == "EmbeddingServiceError"


def test_pass_on_rule_needs_a_learned_stage() -> None:
    rules = [{"name": "x", "when": {"min_chars": 1}, "action": "classifier"}]
    with pytest.raises(ConfigError) as info:
        parse_config(minimal(routing={"rules": rules}))
    assert "routing.classifier" in info.value.expected


def test_rule_needs_exactly_one_of_lane_or_action() -> None:
    rules = [{"name": "x", "when": {"min_chars": 1}, "lane": "light", "action": "classifier"}]
    with pytest.raises(ConfigError):
        parse_config(minimal(routing={"rules": rules, "classifier": {}}))


def test_learned_stage_needs_an_embedder(tmp_path: Path) -> None:
    config = parse_config(minimal(routing={"classifier": {}}))
    with pytest.raises(ConfigError) as info:
        build_router(config, config_path=None, embedder=None)
    assert info.value.field == "routing"


def test_bad_exemplar_file_names_the_field(tmp_path: Path) -> None:
    (tmp_path / "e.yaml").write_text("default:\n  simple: []\n  complex: [a]\n")
    with pytest.raises(ConfigError) as info:
        load_exemplars(tmp_path / "e.yaml")
    assert info.value.field == "default.simple"
