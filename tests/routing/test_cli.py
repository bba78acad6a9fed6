"""`hybrid-gateway router train / eval / calibrate` on a small file, bundled embedder."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from hybrid_gateway.cli import main
from hybrid_gateway.config import load_config
from hybrid_gateway.routing.classifier import load_model
from tests.test_config import EXAMPLE

SIMPLE = [
    "How do I install the client?",
    "Where do I set my password?",
    "What is the default port?",
    "How do I reset my account?",
    "这个接口怎么调用?",
    "在哪里设置语言?",
]
COMPLEX = ["Prove that the square root of two is irrational.", "Derive the closed form of the "
           "sum of the first n cubes.", "Why is the halting problem undecidable? Prove it.",
           "求证:任意奇数的平方减一能被八整除。", "Compare the time complexity of quicksort and "
           "heapsort in the worst case and explain why.", "Show that every group of order p^2 "
           "is abelian."]  # fmt: skip


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("router-cli")
    data = folder / "outcomes.csv"
    with data.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["subject", "prompt", "weak_score", "strong_score"])
        for i, text in enumerate(SIMPLE * 2):
            writer.writerow(["faq", f"{text} ({i})", 1, 1])
        for i, text in enumerate(COMPLEX * 2):
            writer.writerow(["maths", f"{text} ({i})", 0, 1])
    return {"data": data, "model": folder / "m.npz", "cache": folder / "emb.sqlite3",
            "config": folder / "gw.yaml", "out": folder / "calibration"}  # fmt: skip


def test_train_eval_calibrate(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    cache = ["--embed-cache", str(files["cache"])]
    assert main(["router", "train", "--data", str(files["data"]), "--out", str(files["model"]),
                 *cache]) == 0  # fmt: skip
    model = load_model(files["model"], None)
    assert model.namespace.startswith("multilingual-e5-small") and model.info["rows"] == 24
    capsys.readouterr()

    assert main(["router", "eval", "--outcomes", str(files["data"]), "--model",
                 str(files["model"]), "--json", *cache]) == 0  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert report["n"] == 24 and report["apgr"] > report["random"]["apgr"]
    assert {"apgr", "cpt50", "cpt80", "n"} <= set(report["length"])

    files["config"].write_text(EXAMPLE.read_text())
    assert main(["router", "calibrate", "--data", str(files["data"]), "--model",
                 str(files["model"]), "--quality-floor", "0.95", "--config",
                 str(files["config"]), "--out", str(files["out"]), "--min-category-rows", "100",
                 *cache]) == 0  # fmt: skip
    summary = json.loads((files["out"] / "calibration.json").read_text())
    assert summary["chosen"]["quality"] >= 0.95
    config = load_config(files["config"])
    assert config.routing.classifier is not None
    assert config.routing.classifier.threshold == pytest.approx(summary["chosen"]["threshold"],
                                                                abs=1e-4)  # fmt: skip
    assert (files["out"] / "curve.png").stat().st_size > 0
    assert (files["config"].parent / "gw.yaml.bak").read_text() == EXAMPLE.read_text()


def test_calibrate_through_the_rules(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """examples/gateway.yaml's rules send the short questions light before the classifier sees
    them, the short Chinese proof among them: at most 22 of 24 rows can be right, the summary
    names the rule that costs the other two, rules.csv has each rule's lane and quality."""
    cache = ["--embed-cache", str(files["cache"])]
    if not files["model"].exists():
        assert main(["router", "train", "--data", str(files["data"]), "--out",
                     str(files["model"]), *cache]) == 0  # fmt: skip
    config = files["config"].with_name("through.yaml")
    config.write_text(EXAMPLE.read_text())
    out = files["out"].with_name("through")
    capsys.readouterr()
    assert main(["router", "calibrate", "--data", str(files["data"]), "--model",
                 str(files["model"]), "--quality-floor", "0.9", "--config", str(config),
                 "--out", str(out), "--through-rules", "--dry-run", *cache]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "rules decide 14 of 24 questions" in printed
    assert "rule how-to-keywords -> light: 10 rows, light 100.0%, heavy 100.0%\n" in printed
    short = "rule short-single-turn -> light: 4 rows, light 50.0%, heavy 100.0% (below the floor"
    assert short in printed
    summary = json.loads((out / "calibration.json").read_text())
    assert 0.9 <= summary["chosen"]["quality"] <= 22 / 24 + 1e-9
    with (out / "rules.csv").open() as f:
        table = list(csv.DictReader(f))
    assert table and {"rule", "lane", "rows", "light_quality", "heavy_quality"} == set(table[0])
    assert sum(int(r["rows"]) for r in table) <= 24
    assert all(r["lane"] in {"light", "heavy"} for r in table)
    assert config.read_text() == EXAMPLE.read_text()  # --dry-run


def test_eval_names_a_missing_column(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["router", "eval", "--outcomes", str(files["data"]), "--weak", "nope"]) == 2
    assert "no column 'nope'" in capsys.readouterr().err


def test_train_and_cross_validate_with_ngrams(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    cache = ["--embed-cache", str(files["cache"])]
    ngrams = ["--ngram-bits", "12", "--ngram-n", "4"]
    out = files["model"].with_name("ngrams.npz")
    assert main(["router", "train", "--data", str(files["data"]), "--out", str(out), *ngrams,
                 *cache]) == 0  # fmt: skip
    model = load_model(out, None)
    assert model.ngrams is not None and model.ngrams.bits == 12 and model.ngrams.max_n == 4
    capsys.readouterr()
    assert main(["router", "eval", "--outcomes", str(files["data"]), "--cv", "3", "--json",
                 *ngrams, *cache]) == 0  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert report["n"] == 24 and "3-fold" in report["router"]
    with pytest.raises(SystemExit):
        main(["router", "train", "--data", str(files["data"]), "--out", str(out),
              "--ngram-bits", "30", *cache])  # fmt: skip
    assert "--ngram-bits: must be <= 22" in capsys.readouterr().err
