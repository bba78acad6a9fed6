"""`bench run` with the whole article (`full`) end to end, both arrival modes, short.

Real processes (two quality emulators, the gateway on examples/gateway-full.yaml, the load
generator sending the OpenAI wire format); the check is that the run completes and its JSON
carries every figure issue 21 asks for, with consistent arithmetic, not what the figures are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from hybrid_gateway.tools.bench.verdict import ISSUE_GOALS, PROJECT_X
from tests.tools.test_bench_learned_router import labelled_sample
from tests.tools.test_bench_run import bench_cli

COUNT_KEYS = {"served_without_heavy", "hits_by_kind", "fallbacks", "late_deliveries",
              "late_failed", "late_cost_usd", "audits", "audit_cost_usd"}  # fmt: skip


def run_bench(tmp_path: Path, *extra: str) -> dict[str, Any]:
    labelled_sample(tmp_path / "router-sample.jsonl")  # the full strategies learn their router
    _, out = bench_cli(
        tmp_path, "--concurrency", "4", "--duration", "2", "--warmup", "0",
        "--startup-timeout", "90", "--router-sample", str(tmp_path / "router-sample.jsonl"),
        "--router-floor", "0.95", *extra, timeout_s=400,
    )  # fmt: skip
    [json_path] = out.glob("bench-*.json")
    files = [p for p in out.glob(json_path.stem + "*") if p.is_file()]
    suffixes = sorted(p.name[len(json_path.stem) :] for p in files)
    assert suffixes == ["-article.png", "-cost.png", "-latency.png", ".json", ".md"]
    markdown = json_path.with_suffix(".md").read_text()
    assert "## Project X requirements, per strategy and stage" in markdown
    assert "Goal of issue 21 for `full`" in markdown
    assert "p95 with every answer generated alone" in markdown
    report: dict[str, Any] = json.loads(json_path.read_text())
    return report


def test_full_bench_in_both_arrival_modes(tmp_path: Path) -> None:
    report = run_bench(tmp_path, "--strategies", "full,heavy-only", "--mode", "both")
    # heavy-only ran first: the open loop offers the rate it sustained at 4 clients
    assert [r["strategy"] for r in report["results"]] == ["heavy-only"] * 2 + ["full"] * 2
    assert report["table_stages"] == ["c4", "open"]
    rows = {(r["strategy"], r["stage"]): r for r in report["results"]}
    closed = rows["heavy-only", "c4"]
    offered = closed["requests"] / closed["duration_s"]
    for strategy in ("heavy-only", "full"):
        opened = rows[strategy, "open"]
        assert opened["concurrency"] is None
        assert abs(opened["loadgen"]["offered_rate_per_s"] - offered) < 0.01 * offered + 0.01
    for row in report["results"]:
        assert row["requests"] > 0 and row["success_rate"] == 1.0
        assert set(row["project_x_counts"]) == COUNT_KEYS
        assert [ln["key"] for ln in row["project_x"]] == [t.key for t in PROJECT_X]
        for line in row["project_x"]:
            assert set(line) == {"key", "label", "value", "shown", "target", "pass"}
        counts = row["project_x_counts"]
        assert sum(counts["hits_by_kind"].values()) == row["counts"]["cache_hits"]
        assert 0 <= counts["served_without_heavy"] <= row["requests"]
    for stage in ("c4", "open"):
        full, heavy = rows["full", stage], rows["heavy-only", stage]
        assert heavy["relative_cost"] == 1.0
        assert full["relative_cost"] == round(full["cost_per_1k_usd"] / heavy["cost_per_1k_usd"], 4)
        assert [ln["key"] for ln in full["issue_goal"]] == [t.key for t in ISSUE_GOALS]
        assert full["project_x_counts"]["hits_by_kind"]  # 30 items asked 3 times: some hit
    goal = report["goal"]
    assert (goal["strategy"], goal["stage"]) == ("full", "open")
    assert goal["met"] == all(line["pass"] for line in goal["lines"])
    floor = goal["latency_floor"]  # each answer alone at the emulators' step times (floor.py)
    assert floor == rows["full", "open"]["latency_floor"]
    assert floor["oracle_p95_s"] >= 0 and floor["routed_p95_s"] >= 0
    assert 0 <= floor["ideal_p95_s"] <= floor["oracle_p95_s"]  # a cache serving paraphrases too
    assert set(floor["by_class"]) <= {"simple", "complex"} and floor["by_class"]
    # (30 items asked 3 times, the closed loop wrapping round them: most requests repeat one
    # asked before, so a perfect cache's p95 may well be 0 s; floor.py's tests check the values)
    # what holds each missed line back (held_back.py): one entry per failed line, no other
    failed = {ln["key"] for ln in goal["lines"] if ln["pass"] is False}
    failed |= {ln["key"] for ln in rows["full", "open"]["project_x"] if ln["pass"] is False}
    assert {e["key"] for e in goal["held_back"]} == failed
    for entry in goal["held_back"]:
        assert {"key", "label", "value", "target", "short_by", "ablations", "reading"} <= set(entry)
        assert entry["short_by"] > 0 and entry["reading"]
    for row in report["results"]:  # 30 items asked 3 times: repeats the stage itself asks
        ceiling = row["repeat_ceiling"]
        assert ceiling["any"] == round(ceiling["verbatim"] + ceiling["paraphrase"], 4)
        assert row["cache_hit_rate"] <= ceiling["any"] + 1e-9
    assert report["settings"]["mode"] == "both" and report["settings"]["rate_per_s"] is None
    # the router learned before the run: 80 sample questions, none asked by the measured run;
    # full's gateway routed with it, and the report says so
    router = report["settings"]["router"]
    assert (router["rows"], router["left_out"], router["floor"]) == (80, 0, 0.95)
    assert any("classifier was learned before the run from 80" in n for n in report["notes"])
    run_dir = Path(report["settings"]["run_dir"])
    classifier = yaml.safe_load((run_dir / "full" / "gateway.yaml").read_text())["routing"][
        "classifier"
    ]
    assert classifier["model"] == str(run_dir / "router" / "router.npz")
    assert classifier["threshold"] == router["threshold"]
    assert classifier["cascade"]["model"] == str(run_dir / "router" / "router-static.npz")
