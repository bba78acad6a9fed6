"""`router calibrate --from-log` and `cache calibrate | train-verifier | train-reranker
--from-log` on a real SQLite request log with audits rows, and their one-line errors."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from hybrid_gateway.cli import main
from hybrid_gateway.config import load_config
from hybrid_gateway.learning.from_log import audited_router_rows, read_audits
from tests.learning.audit_logs import write_cache_audits, write_config, write_router_audits


def test_router_calibrate_from_the_audits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    asyncio.run(write_router_audits(tmp_path / "requests.sqlite3", time.time() - 600, 48))
    rows = audited_router_rows(read_audits("", config, "1d", categories=True))
    assert len(rows) == 48 and {r.category for r in rows} == {"faq", "maths"}
    assert {(r.weak, r.strong) for r in rows if r.category == "maths"} == {(0.0, 1.0)}
    out = tmp_path / "calibration"
    args = ["router", "calibrate", "--from-log", "--config", str(config), "--out", str(out),
            "--quality-floor", "0.95", "--min-category-rows", "10",
            "--embed-cache", str(tmp_path / "emb.sqlite3")]  # fmt: skip
    assert main(args) == 0
    summary = json.loads((out / "calibration.json").read_text())
    # the light answers to "maths" questions were worse: that category is gated to heavy
    assert summary["heavy_categories"] == ["maths"] and summary["chosen"]["quality"] >= 0.95
    routing = load_config(config).routing
    assert routing.gates is not None and routing.gates.heavy_categories == ("maths",)
    assert routing.classifier is not None
    assert routing.classifier.threshold == pytest.approx(summary["chosen"]["threshold"], abs=1e-4)
    # the log file given directly, dry run
    capsys.readouterr()
    log = tmp_path / "requests.sqlite3"
    args[3:3] = [str(log)]
    assert main([*args, "--dry-run"]) == 0
    assert "updated" not in capsys.readouterr().out


def test_router_calibrate_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    base = ["router", "calibrate", "--config", str(config), "--out", str(tmp_path / "o")]
    asyncio.run(write_router_audits(tmp_path / "requests.sqlite3", time.time() - 600, 10))
    assert main([*base, "--from-log"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "10 usable router audits" in err
    asyncio.run(
        write_router_audits(tmp_path / "other.sqlite3", time.time() - 600, 30, prompts=False)
    )
    assert main([*base, "--from-log", str(tmp_path / "other.sqlite3")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "prompts: none" in err
    assert main([*base, "--from-log", str(tmp_path / "missing.sqlite3")]) == 2
    assert "no such request log" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # --data and --from-log are one or the other
        main([*base, "--from-log", "--data", "x.csv"])


def test_cache_calibrate_and_train_verifier_from_the_audits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    asyncio.run(write_cache_audits(tmp_path / "requests.sqlite3", time.time() - 600, 90))
    cache = ["--embeddings-cache", str(tmp_path / "emb.sqlite3")]
    model = tmp_path / "verifier.npz"
    args = ["cache", "train-verifier", "--from-log", "--config", str(config), "--out",
            str(model), "--hidden", "0", *cache]  # fmt: skip
    assert main(args) == 0
    assert "trained on 90 pairs" in capsys.readouterr().out
    args = ["cache", "calibrate", "--from-log", "--config", str(config),
            "--target-precision", "0.5", *cache]  # fmt: skip
    assert main(args) == 0
    written = load_config(config).cache.semantic
    assert written.calibrated_on is not None and "audited-pairs.jsonl (90 pairs" in (
        written.calibrated_on
    )


def test_cache_from_log_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, prompts="none")
    asyncio.run(
        write_cache_audits(tmp_path / "requests.sqlite3", time.time() - 600, 30, prompts=False)
    )
    for action in ("calibrate", "train-verifier"):
        args = ["cache", action, "--from-log", "--config", str(config)]
        assert main([*args, *(["--out", "m.npz"] if action != "calibrate" else [])]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "prompts: none" in err and f"{action} --from-log" in err
    few = tmp_path / "few"
    few.mkdir()
    asyncio.run(write_cache_audits(few / "requests.sqlite3", time.time() - 600, 5))
    args = ["cache", "train-reranker", "--from-log", str(few / "requests.sqlite3"), "--out", "m"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "5 audited pairs" in err and "at least 20" in err
    assert main(["cache", "train-reranker", "--from-log", "--out", "m"]) == 2
    assert "--from-log needs" in capsys.readouterr().err
