"""`hybrid-gateway misroutes` on a request log written by the gateway's own log and store."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from hybrid_gateway.cli import main
from hybrid_gateway.config import load_config
from hybrid_gateway.feedback import Reason
from hybrid_gateway.review.reader import LoggedRequest
from tests.review.helpers import config_data, logged, write_log, write_yaml

SIMPLE = ["How do I reset my password?", "How do I top up my card?", "花呗怎么还款",
          "借呗怎么提额", "How do I change my PIN?", "How do I close my account?"]  # fmt: skip
COMPLEX = ["How do I prove that the square root of 2 is irrational?",
           "How do I prove there are infinitely many primes?",
           "怎么证明根号2是无理数？", "怎么证明素数有无穷多个？"]  # fmt: skip


def workload(now: float) -> tuple[list[LoggedRequest], list[tuple[str, Reason | None]]]:
    rows: list[LoggedRequest] = []
    downs: list[tuple[str, Reason | None]] = []
    for i, text in enumerate(SIMPLE + COMPLEX):
        rows.append(logged(text, ts=now - 3000 + 120 * i, rid=f"q{i}"))
        if text in COMPLEX:
            downs.append((f"q{i}", Reason.WRONG))
    return rows, downs


def run_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["misroutes", *args, "--json"]) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out.splitlines()[0])
    return out


def test_review_report_and_apply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "requests.sqlite3"
    write_log(log, *workload(time.time()))
    config = write_yaml(tmp_path / "gw.yaml", config_data(log))
    out = tmp_path / "report"
    args = ["--config", str(config), "--since", "24h", "--out", str(out)]
    data = run_json(args, capsys)
    assert (data["requests"], data["flagged"], data["thumbs_down"]) == (10, 4, 4)
    top = data["proposals"][0]  # type: ignore[index]
    assert top["kind"] == "new_rule" and top["effect"]["flagged_fixed"] == 4
    assert top["effect"]["collateral"] == 0
    assert top["effect"]["heavy_share_before"] == 0 and top["effect"]["heavy_share_after"] == 0.4
    words = top["edits"][0]["value"]["when"]["keywords_any"]
    assert "prove" in words and any("证明" in w for w in words)
    page = (out / "misroutes.html").read_text()
    assert "<script" not in page and "http" not in page and "Cluster 1" in page
    assert "flagged fixed" in (out / "misroutes.md").read_text()

    assert main(["misroutes", *args, "--apply", "1"]) == 0
    assert "POST /admin/reload" in capsys.readouterr().err
    assert (tmp_path / "gw.yaml.bak").exists()
    rules = load_config(config).routing.rules
    assert rules[0].lane == "heavy" and "prove" in rules[0].when.keywords_any
    # the same review on the changed config: the proofs already route heavy, nothing to fix
    again = run_json(args, capsys)
    assert all(p["effect"]["flagged_fixed"] == 0 for p in again["proposals"])  # type: ignore[attr-defined]


def test_apply_a_missing_proposal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "requests.sqlite3"
    write_log(log, [logged("How do I reset my password?", ts=time.time() - 60)])
    config = write_yaml(tmp_path / "gw.yaml", config_data(log))
    code = main(["misroutes", "--config", str(config), "--out", str(tmp_path), "--apply", "1"])
    assert code == 2 and "has 0 proposals" in capsys.readouterr().err


def test_hashed_prompts_group_by_rule_and_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    rows, downs = workload(now)
    hashed = [r.__class__(**{**{s: getattr(r, s) for s in r.__slots__},
                             "prompt": hashlib.sha256((r.prompt or "").encode()).hexdigest()})
              for r in rows]  # fmt: skip
    log = tmp_path / "requests.sqlite3"
    write_log(log, hashed, downs)
    config = write_yaml(tmp_path / "gw.yaml", config_data(log, prompts="hash"))
    data = run_json(["--config", str(config), "--out", str(tmp_path / "o")], capsys)
    assert data["flagged"] == 4 and data["proposals"] == []
    assert [c["decisions"] for c in data["clusters"]] == [{"light / how-to-light": 4}]  # type: ignore[attr-defined]
    assert any("hashes" in n for n in data["notes"])  # type: ignore[attr-defined]


def test_classifier_misroutes_get_a_threshold_move_replayed_with_the_shipped_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    rows = [logged(text, ts=now - 900 + 100 * i, rid=f"c{i}", rule="classifier", score=score)
            for i, (text, score) in enumerate([
                ("Prove that every bounded monotone sequence converges.", 0.41),
                ("Derive the closed form of the Fibonacci numbers.", 0.44),
                ("What time is it in Tokyo?", 0.2)])]  # fmt: skip
    log = tmp_path / "requests.sqlite3"
    write_log(log, rows, [("c0", Reason.WRONG), ("c1", Reason.TOO_SHALLOW)])
    data = config_data(log, rules=[], classifier={"model": "default", "threshold": 0.5})
    config = write_yaml(tmp_path / "gw.yaml", data)
    review = run_json(["--config", str(config), "--out", str(tmp_path / "o")], capsys)
    moves = [p for p in review["proposals"] if p["kind"] == "threshold"]  # type: ignore[attr-defined]
    assert [m["edits"][0]["value"] for m in moves] == [0.41]
    assert moves[0]["effect"]["replayed"] == 3
    assert review["clusters"][0]["decisions"] == {"light / classifier (score 0.41-0.44)": 2}  # type: ignore[index]
