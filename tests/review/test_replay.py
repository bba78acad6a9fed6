"""Replay arithmetic: lanes from the real router, costs from the channel prices."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hybrid_gateway.config import parse_config
from hybrid_gateway.review.collect import Flagged
from hybrid_gateway.review.proposals import Edit, apply_edits
from hybrid_gateway.review.replay import Routes, effect, parse_text, request_cost, route_all
from hybrid_gateway.review.vectors import PromptVectors
from tests.review.helpers import WordVectors, config_data, logged, write_yaml


def test_costs_and_shares_before_and_after() -> None:
    config = parse_config(config_data(Path("x")))
    requests = [
        logged("a", rid="fixed", prompt_tokens=1000, completion_tokens=500),
        logged("b", rid="collateral", prompt_tokens=2000, completion_tokens=0),
        logged("c", rid="same", prompt_tokens=0, completion_tokens=1000),
        logged("d", rid="cached", cache="exact"),
    ]
    # light: $1 / $2 per 1M tokens in / out; heavy: $10 / $20
    assert request_cost(requests[0], "light", config) == pytest.approx(0.002)
    assert request_cost(requests[0], "heavy", config) == pytest.approx(0.02)
    before = Routes(config, ("light", "light", "heavy", None))
    after = Routes(config, ("heavy", "heavy", "heavy", None))
    flagged = [Flagged(requests[0], "wrong", None, "complex")]
    e = effect(requests, flagged, before, after)
    assert (e.replayed, e.flagged_changed, e.flagged_fixed, e.collateral, e.net) == (3, 1, 1, 1, 0)
    assert e.heavy_share_before == pytest.approx(1 / 3) and e.heavy_share_after == 1.0
    assert e.cost_before_usd == pytest.approx(0.002 + 0.002 + 0.02)
    assert e.cost_after_usd == pytest.approx(0.02 + 0.02 + 0.02)


def test_route_all_uses_the_real_router_under_the_edited_config(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "gw.yaml", config_data(tmp_path / "log.sqlite3"))
    requests = [
        logged("How do I prove Fermat's little theorem?", rid="proof"),
        logged("How do I reset my password?", rid="faq"),
        logged("Tell me about the weather", rid="other", lane="heavy", rule="default"),
        logged("How do I?", rid="cached", cache="semantic"),
    ]
    text = path.read_text()
    rule = {"name": "proofs", "when": {"keywords_any": ["prove"]}, "lane": "heavy"}
    edited = parse_text(apply_edits(text, [Edit("insert_rule", 0, rule)]), path)
    vectors = PromptVectors(WordVectors())

    async def both() -> tuple[Routes, Routes]:
        before = await route_all(parse_text(text, path), path, requests, vectors)
        return before, await route_all(edited, path, requests, vectors)

    before, after = asyncio.run(both())
    assert before.lanes == ("light", "light", "heavy", None)
    assert after.lanes == ("heavy", "light", "heavy", None)
    assert asyncio.run(route_all(edited, path, requests, None)).lanes == (None,) * 4  # hashes
