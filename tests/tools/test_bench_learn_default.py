"""`bench learn --part default`: issue 23's default-workload goal (learncurve/default_goal.py).

The routing arithmetic and the verdicts on hand-made figures; then the whole part on a tiny
workload: real emulators and a gateway whose router audits land in its request log, a router
learned from them, the unseen part scored, the files written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybrid_gateway.cli import main
from hybrid_gateway.routing.calibrate_cli import RuleDecision
from hybrid_gateway.tools.learncurve.default_goal import routing_figures
from hybrid_gateway.tools.learncurve.report import markdown, verdicts
from hybrid_gateway.tools.workload.schema import Labels, WorkloadItem, write_workload

from .test_workload_builder import DATA

LEARNED = "rules + classifier learned from audits"


def test_a_rule_decides_before_the_threshold_and_quality_counts_light_answers_only() -> None:
    decided = [RuleDecision("r-light", False), RuleDecision("r-heavy", True)] + [
        RuleDecision("", None)
    ] * 4
    scores = np.array([0.9, 0.1, 0.8, 0.6, 0.3, 0.1])
    weak = np.array([0.0, 0.0, 0.0, 1.0, 0.0, 1.0])  # rows 0 and 4: light fails, heavy not
    strong = np.ones(6)
    got = routing_figures(decided, scores, 0.5, weak, strong, light_cost=0.1)
    # heavy: row 1 (rule), rows 2 and 3 (score >= 0.5); light: row 0 (rule, fails), 4 (fails), 5
    assert got == {"quality": round(4 / 6, 4), "heavy_share": 0.5,
                   "relative_cost": round(0.5 + 0.5 * 0.1, 4), "by_rules": 2}  # fmt: skip
    everything_heavy = routing_figures(decided, scores, -np.inf, weak, strong, light_cost=0.1)
    assert everything_heavy["heavy_share"] == round(5 / 6, 4)  # the light rule still decides
    assert everything_heavy["quality"] == round(5 / 6, 4)


def report_with(quality: float, cost: float, rules_cost: float, share: float) -> dict[str, Any]:
    routing = {"quality": quality, "heavy_share": cost, "relative_cost": cost, "by_rules": 3}
    rules = {"quality": 0.97, "heavy_share": 0.5, "relative_cost": rules_cost, "by_rules": 3}
    default = {
        "settings": {"floor": 0.99}, "sent": 100, "audits": 40, "unseen_part": 50,
        "audit_share_of_heavy_only": share, "light_cost": 0.1,
        "learned": {"rows": 40, "heavy_only_share": 0.2, "threshold": 0.6,
                    "expected_heavy_share": 0.3, "expected_quality": 0.991,
                    "handed_to_classifier": ["short-single-turn"]},
        "routings": {"rules alone": rules, "rules + shipped classifier": rules, LEARNED: routing},
    }  # fmt: skip
    return {"default": default, "started_at": "2026-12-04T00:00:00", "wall_s": 1.0,
            "command": "bench learn"}  # fmt: skip


def test_the_default_goal_is_met_only_at_the_floor_below_the_rules_cost_within_the_spend() -> None:
    met = verdicts(report_with(0.992, 0.30, 0.55, 0.04))
    assert [v["met"] for v in met] == [True, True, True]
    assert met[1]["measured"] == round(0.30 / 0.55, 4)
    assert [v["met"] for v in verdicts(report_with(0.985, 0.30, 0.55, 0.04))] == [False, True, True]
    assert [v["met"] for v in verdicts(report_with(0.995, 0.60, 0.55, 0.04))] == [True, False, True]
    assert [v["met"] for v in verdicts(report_with(0.995, 0.30, 0.55, 0.06))] == [True, True, False]
    report = report_with(0.992, 0.30, 0.55, 0.04)
    report["verdicts"] = verdicts(report)
    text = markdown(report)
    assert "## Default workload: 100 items sent, 40 router audits" in text
    assert f"| {LEARNED} | 99.20% | 30.0% | 30.0% | 3 |" in text
    assert "rules handed to the classifier: short-single-turn" in text


def default_workload(path: Path, n: int = 160) -> Path:
    items = []
    for i in range(n):
        hard = i % 3 == 0
        text = (f"Prove that every bounded monotone sequence number {i} converges, and derive its "
                f"limit step by step." if hard else
                f"What are the opening hours of the branch office number {i} on weekends?")
        labels = Labels(not hard, True, "complex" if hard else "simple", "t", "t", f"g{i}", "en",
                        "measured")  # fmt: skip
        message = {"role": "user", "content": text}
        items.append(WorkloadItem(f"w{i:03d}", 0.0, "default", (message,), 32, 8, False, labels))
    write_workload(path, items, {"seed": 1})
    return path


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data is not here")
def test_bench_learn_default_learns_from_the_audits_and_scores_the_unseen_part(
    tmp_path: Path,
) -> None:
    code = main(["bench", "learn", "--out", str(tmp_path), "--name", "tiny", "--data", str(DATA),
                 "--part", "default", "--default-workload",
                 str(default_workload(tmp_path / "d.jsonl")), "--default-unseen", "40",
                 "--default-rate", "1", "--default-floor", "0.95", "--concurrency", "4",
                 "--no-plots"])  # fmt: skip
    assert code == 0
    report = json.loads((tmp_path / "tiny.json").read_text())
    default = report["default"]
    assert default["sent"] == 120 and default["unseen_part"] == 40
    # rate 1, less the audits skipped while a lane is busy (learning/auditor.py)
    assert 20 <= default["learned"]["rows"] <= default["audits"] <= 120
    assert default["audit_share_of_heavy_only"] > 0.1  # each audit asked the heavy lane again
    assert set(default["routings"]) == {"rules alone", "rules + shipped classifier", LEARNED}
    rules = default["routings"]["rules alone"]
    assert rules["heavy_share"] == 1.0 and rules["quality"] == 1.0  # no rule fires: default lane
    learned = default["routings"][LEARNED]
    assert 0 <= learned["heavy_share"] <= 1 and 0 <= learned["quality"] <= 1
    assert Path(default["learned"]["model"]).is_file()
    assert report["verdicts"][0]["goal"].startswith("default workload: quality")
    assert "## Default workload: 120 items sent" in (tmp_path / "tiny.md").read_text()
