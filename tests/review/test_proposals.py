"""Keyword mining and proposals on a synthetic cluster: maths questions caught by a how-to rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hybrid_gateway.config import parse_config
from hybrid_gateway.review.collect import Flagged
from hybrid_gateway.review.keywords import candidates, choose
from hybrid_gateway.review.proposals import Edit, propose, threshold_proposal
from hybrid_gateway.routing.settings import RoutingConfig
from tests.review.helpers import LIGHT_RULE, config_data, logged

FLAGGED_TEXTS = [
    "How do I prove that the square root of 2 is irrational?",
    "How do I prove there are infinitely many primes?",
    "How do I prove the sum of angles in a triangle is 180 degrees?",
    "怎么证明根号2是无理数？",
    "怎么证明素数有无穷多个？",
]
UNFLAGGED = [
    "How do I reset my password?", "How do I top up my card?", "How do I change my PIN?",
    "花呗怎么还款", "借呗怎么提额", "How do I close my account?", "Explain how a proof works",
]  # fmt: skip


def flagged(texts: list[str], **extra: object) -> list[Flagged]:
    return [Flagged(logged(t, ts=float(i), **extra), "wrong", None, "complex")  # type: ignore[arg-type]
            for i, t in enumerate(texts)]  # fmt: skip


def routing(**extra: Any) -> RoutingConfig:
    return parse_config(config_data(Path("x"), **extra)).routing


def test_candidates_cover_words_pairs_and_chinese_ngrams() -> None:
    found = candidates("How do I prove 根号2是无理数")
    assert {"prove", "i prove", "根号", "无理数", "是无理数"} <= found
    assert "do i" not in found  # two stop words
    assert "how" not in found  # stop word


def test_keywords_are_common_in_the_cluster_and_rare_elsewhere() -> None:
    chosen = [k.text for k in choose(FLAGGED_TEXTS, UNFLAGGED)]
    assert chosen[0] == "prove"  # 3 of 5; "how do i" is everywhere in the unflagged traffic
    assert "证明" in chosen[1]  # the Chinese ones need their own keyword
    assert not any(k in ("how do i", "怎么") for k in chosen)


def test_a_new_heavy_rule_goes_before_the_rule_that_sent_them() -> None:
    proposals = propose((1,), flagged(FLAGGED_TEXTS), UNFLAGGED, routing())
    kinds = [p.kind for p in proposals]
    assert kinds == ["new_rule", "remove_keyword"]
    new = proposals[0].edits[0]
    assert new.op == "insert_rule" and new.index == 0
    assert new.value["lane"] == "heavy" and "prove" in new.value["when"]["keywords_any"]
    # "how do i" caught 3 of the 5 (a majority): dropping it is the other candidate
    removal = proposals[1]
    assert removal.edits == (Edit("set_keywords", 0, ["怎么"]),)


def test_an_existing_heavy_keyword_rule_is_extended_instead() -> None:
    heavy = {"name": "maths-heavy", "when": {"keywords_any": ["integral"]}, "lane": "heavy"}
    config = routing(rules=[heavy, LIGHT_RULE])
    found = propose((2,), flagged(FLAGGED_TEXTS), UNFLAGGED, config)[0]
    assert found.kind == "add_keyword" and found.edits[0].op == "set_keywords"
    assert found.edits[0].index == 0 and found.edits[0].value[0] == "integral"
    assert "prove" in found.edits[0].value


def test_a_lone_keyword_removal_deletes_the_rule() -> None:
    rule = {"name": "proofs-light", "when": {"keywords_any": ["prove"]}, "lane": "light"}
    texts = FLAGGED_TEXTS[:3]
    found = propose((1,), flagged(texts, rule="proofs-light"), UNFLAGGED, routing(rules=[rule]))
    assert [p.edits[0].op for p in found if p.kind == "remove_keyword"] == ["delete_rule"]


def test_threshold_moves_below_every_flagged_score() -> None:
    config = routing(rules=[], classifier={"threshold": 0.6})
    group = flagged(["a", "b"], rule="classifier", score=0.47)
    group += flagged(["c"], rule="classifier", score=0.52)
    moved = threshold_proposal((1,), group, config)
    assert moved is not None and moved.edits == (Edit("set_threshold", value=0.47),)
    slow = [Flagged(logged("d", lane="heavy", rule="classifier", score=0.71), "too_slow", None,
                    "simple")]  # fmt: skip
    raised = threshold_proposal((1,), slow, config)
    assert raised is not None and raised.edits[0].value == 0.72
    # a decision of a versioned model (learning.router_update) is the classifier's too
    versioned = flagged(["a", "b"], rule="classifier@v3", score=0.47)
    moved = threshold_proposal((1,), versioned, config)
    assert moved is not None and moved.edits == (Edit("set_threshold", value=0.47),)
