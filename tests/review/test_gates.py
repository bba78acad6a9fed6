"""Category-gate proposals: flagged light answers concentrated in one declared category."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from hybrid_gateway.cli import main
from hybrid_gateway.config import load_config, parse_config
from hybrid_gateway.feedback import Reason
from hybrid_gateway.observability.log_rows import CATEGORY_CHARS
from hybrid_gateway.review.analysis import Review, run_review
from hybrid_gateway.review.collect import Flagged, Want
from hybrid_gateway.review.proposals import Edit, gate_proposals
from hybrid_gateway.review.reader import LoggedRequest, LogReader
from hybrid_gateway.review.vectors import PromptVectors
from hybrid_gateway.routing.settings import RoutingConfig
from tests.review.helpers import WordVectors, config_data, logged, write_log, write_yaml


def routing(**extra: Any) -> RoutingConfig:
    return parse_config(config_data(Path("x"), **extra)).routing


def flag(category: str | None, want: Want = "complex", **extra: Any) -> Flagged:
    lane = "light" if want == "complex" else "heavy"
    reason = "wrong" if want == "complex" else "too_slow"
    return Flagged(logged("q", lane=lane, category=category, **extra), reason, None, want)


def slow(category: str) -> Flagged:
    """A heavy answer its category's gate sent, rated too slow."""
    return flag(category, "simple", rule=f"gate:{category}")


def test_a_category_of_flagged_light_answers_is_gated_across_clusters() -> None:
    members = [(1, flag("maths")), (3, flag("maths")), (3, flag("maths")), (2, flag("banking")),
               (2, flag(None)), (1, flag("maths", "simple", rule="how-to-light"))]  # fmt: skip
    found = gate_proposals(members, routing())
    assert [(p.kind, p.clusters, p.edits) for p in found] == [
        ("add_gate", (1, 3), (Edit("set_gates", value=["maths"]),)),
    ]  # fmt: skip
    assert "maths" in found[0].title and "heavy" in found[0].title
    kept = gate_proposals(members, routing(gates={"heavy_categories": ["law"]}))
    assert kept[0].edits == (Edit("set_gates", value=["law", "maths"]),)


@pytest.mark.parametrize(
    "members",
    [
        [(1, flag("maths"))],  # one complaint
        [(1, flag("maths")), (1, flag("maths")), (2, slow("maths")), (2, slow("maths"))],
        [(1, flag("x" * CATEGORY_CHARS)), (1, flag("x" * CATEGORY_CHARS))],  # maybe cut
        [(1, flag("law")), (2, flag("law"))],  # already gated
    ],
)
def test_no_gate_without_a_clear_concentration(members: list[tuple[int, Flagged]]) -> None:
    assert gate_proposals(members, routing(gates={"heavy_categories": ["law"]})) == []


def test_a_gate_whose_heavy_answers_are_too_slow_is_removed() -> None:
    found = gate_proposals(
        [(1, slow("law")), (2, slow("law"))], routing(gates={"heavy_categories": ["law", "maths"]})
    )
    assert [(p.kind, p.edits) for p in found] == [
        ("remove_gate", (Edit("set_gates", value=["maths"]),)),
    ]  # fmt: skip


MATHS = ["How do I integrate x squared?", "How do I factor a cubic polynomial?",
         "怎么解这个方程组？"]  # fmt: skip
FAQ = ["How do I reset my password?", "How do I top up my card?", "How do I change my PIN?",
       "花呗怎么还款"]  # fmt: skip


def workload(now: float) -> tuple[list[LoggedRequest], list[tuple[str, Reason | None]]]:
    """All answered light by the how-to rule; the maths ones (but one) rated wrong."""
    rows = [logged(t, ts=now - 3000 + 120 * i, rid=f"m{i}", category="maths")
            for i, t in enumerate([*MATHS, "How do I add fractions?"])]  # fmt: skip
    rows += [logged(t, ts=now - 2000 + 120 * i, rid=f"f{i}", category="banking")
             for i, t in enumerate(FAQ)]  # fmt: skip
    return rows, [(f"m{i}", Reason.WRONG) for i in range(len(MATHS))]


def review(config: Path, log: Path, now: float) -> Review:
    async def run() -> Review:
        connection = sqlite3.connect(log)
        try:
            window = (now - 86_400, now + 1)
            vectors = PromptVectors(WordVectors())
            return await run_review(load_config(config), config, LogReader(connection), window,
                                    vectors)  # fmt: skip
        finally:
            connection.close()

    return asyncio.run(run())


def test_the_gate_replays_with_the_logged_category_and_fixes_them(tmp_path: Path) -> None:
    now = time.time()
    log = tmp_path / "requests.sqlite3"
    write_log(log, *workload(now))
    config = write_yaml(tmp_path / "gw.yaml", config_data(log))
    found = review(config, log, now)
    gates = [r for r in found.ranked if r.proposal.kind == "add_gate"]
    assert len(gates) == 1 and gates[0].proposal.edits[0].value == ["maths"]
    effect = gates[0].effect
    assert effect is not None
    # the three flagged move to heavy; the unflagged maths question goes with them
    assert (effect.flagged_fixed, effect.collateral, effect.replayed) == (3, 1, 8)
    assert (effect.heavy_share_before, effect.heavy_share_after) == (0.0, 0.5)
    assert effect.cost_after_usd > effect.cost_before_usd
    # the three are in clusters of their own (no shared words): the gate spans them
    assert sorted(gates[0].proposal.clusters) == [c.number for c in found.clusters]
    assert sum(n for c in found.clusters for _, n in c.categories()) == 3


def test_apply_writes_the_gate_into_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    log = tmp_path / "requests.sqlite3"
    write_log(log, *workload(now))
    config = write_yaml(tmp_path / "gw.yaml", config_data(log))
    args = ["misroutes", "--config", str(config), "--since", "24h", "--out", str(tmp_path / "o")]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out.splitlines()[0])
    gate = next(p for p in data["proposals"] if p["kind"] == "add_gate")
    assert gate["effect"]["flagged_fixed"] == 3
    assert main([*args, "--apply", str(gate["number"])]) == 0
    gates = load_config(config).routing.gates
    assert gates is not None and gates.heavy_categories == ("maths",)
    assert (tmp_path / "gw.yaml.bak").exists()
    markdown = (tmp_path / "o" / "misroutes.md").read_text()
    assert "categories: maths (" in markdown
