"""`hybrid-gateway cache eval` and `cache calibrate` on a small labelled file, with the real
bundled embedder (a few dozen texts)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from hybrid_gateway.cache.semantic.cli_config import Rule, write_decision
from hybrid_gateway.cli import main
from hybrid_gateway.config import load_config

SAME = [
    ("怎么修改登录密码", "如何修改登录密码"), ("信用卡怎么激活", "信用卡如何激活？"),
    ("退款多久到账", "退款多长时间到账"), ("开户需要带什么证件", "开户要带哪些证件"),
    ("花呗怎么还款", "花呗如何还款"), ("手机银行怎么转账", "手机银行如何转账"),
    ("How do I reset my password?", "How can I reset my password?"),
    ("What are your opening hours?", "What are your opening times?"),
    ("How do I close my account?", "How can I close my account?"),
    ("Where is the nearest ATM?", "Where's the nearest ATM?"),
    ("网银转账限额是多少", "网银转账限额是多少？"), ("借呗怎么提前还款", "借呗如何提前还款"),
]  # fmt: skip
DIFFERENT = [
    ("怎么修改登录密码", "今天天气怎么样"), ("信用卡怎么激活", "房贷利率是多少"),
    ("退款多久到账", "怎么开发票"),
    ("How do I reset my password?", "What is the capital of France?"),
    ("What are your opening hours?", "How do I apply for a loan?"),
    ("网银转账限额是5000吗", "网银转账限额是50000吗"), ("花呗怎么还款", "花呗怎么不能还款"),
    ("Where is the nearest ATM?", "Where is the nearest school?"),
]  # fmt: skip


def write_pairs(
    path: Path, suffix: str = "", *, same: Sequence[tuple[str, str]] = SAME,
    different: Sequence[tuple[str, str]] = DIFFERENT,
) -> Path:  # fmt: skip
    """A TSV of the pairs, each text ending in ``suffix``: other pairs of the same kind."""
    rows = [f"{a}{suffix}\t{b}{suffix}\t1" for a, b in same]
    rows += [f"{a}{suffix}\t{b}{suffix}\t0" for a, b in different]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def no_nan(constant: str) -> float:
    raise AssertionError(f"not valid JSON: {constant}")


@pytest.fixture
def pairs(tmp_path: Path) -> Path:
    return write_pairs(tmp_path / "pairs.tsv")


def test_eval_prints_both_rules_and_writes_the_curve(
    pairs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    test = write_pairs(tmp_path / "test.tsv", "!")
    with test.open("a", encoding="utf-8") as handle:  # two DEV pairs, one of them reversed
        handle.write(f"{SAME[0][0]}\t{SAME[0][1]}\t1\n{SAME[1][1]}\t{SAME[1][0]}\t1\n")
    code = main(["cache", "eval", "--pairs", str(test), "--calibrate-on", str(pairs),
                 "--target-precision", "0.8", "--json", "--curve-out", str(tmp_path / "curve"),
                 "--embeddings-cache", str(tmp_path / "emb.sqlite3")])  # fmt: skip
    assert code == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out, parse_constant=no_nan)
    for key in ("threshold", "precision", "recall", "auc", "n", "target_met"):
        assert key in report and key in report["plain"] and key in report["decision"]
    assert report["overlap_dropped"] == 2 and "2 TEST pairs are also DEV pairs" in captured.err
    assert report["n"] == len(SAME) + len(DIFFERENT)  # the two DEV pairs left out of TEST
    assert report["precision"] >= 0.8 and report["recall"] > 0.5 and report["target_met"]
    assert report["decision"]["auc"] > 0.8
    assert "numbers" in report["guards"] or "negation" in report["guards"]
    assert (tmp_path / "curve" / "test-curve.csv").read_text().startswith("rule,threshold")
    assert (tmp_path / "curve" / "test-curve.png").stat().st_size > 1000


def test_eval_on_its_own_dev_pairs_is_refused(
    pairs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["cache", "eval", "--pairs", str(pairs), "--calibrate-on", str(pairs)])
    assert code == 2 and "every one is also in DEV" in capsys.readouterr().err


def test_one_class_test_gives_valid_json_and_no_target_gives_no_precision(
    pairs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    test = write_pairs(tmp_path / "same.tsv", "!", different=())
    args = ["cache", "eval", "--pairs", str(test), "--calibrate-on", str(pairs), "--json",
            "--embeddings-cache", str(tmp_path / "emb.sqlite3")]  # fmt: skip
    assert main([*args, "--target-precision", "0.8"]) == 0
    report = json.loads(capsys.readouterr().out, parse_constant=no_nan)
    assert report["auc"] is None and report["plain"]["auc"] is None  # one class: no AUC
    # 20 DEV pairs cannot certify 0.99: no threshold, and no precision claimed for no hits
    assert main([*args, "--target-precision", "0.99"]) == 0
    report = json.loads(capsys.readouterr().out, parse_constant=no_nan)
    for rule in (report, report["plain"], report["decision"], report["verifier"]):
        assert rule["target_met"] is False and rule["threshold"] is None
        assert rule["precision"] is None and rule["recall"] == 0.0
    assert report["decision"]["dev_precision"] is None


def test_curve_without_matplotlib_still_writes_the_csv_and_the_json(
    pairs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what `import matplotlib` sees
    test = write_pairs(tmp_path / "test.tsv", "!")
    code = main(["cache", "eval", "--pairs", str(test), "--calibrate-on", str(pairs),
                 "--target-precision", "0.8", "--json", "--curve-out", str(tmp_path / "curve"),
                 "--embeddings-cache", str(tmp_path / "emb.sqlite3")])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)["n"] == len(SAME) + len(DIFFERENT)
    assert "matplotlib is not installed" in captured.err
    rows = (tmp_path / "curve" / "test-curve.csv").read_text().splitlines()
    assert rows[0].startswith("rule,threshold") and len(rows) > 100
    assert not (tmp_path / "curve" / "test-curve.png").exists()


def test_calibrate_writes_the_decision_into_the_config(pairs: Path, tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    original = {
        "channels": {"c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "lanes": {"heavy": {"channel": "c"}, "light": {"channel": "c"}},
        # an earlier reranker and verifier calibration: a plain one replaces both
        "cache": {"semantic": {"enabled": True, "verifier": "v.npz", "verifier_threshold": 0.5,
                               "reranker": {"kind": "e5-cross-encoder", "path": "r.npz"}}},
    }  # fmt: skip
    config.write_text(yaml.safe_dump(original))
    config.chmod(0o640)
    code = main(["cache", "calibrate", "--pairs", str(pairs), "--target-precision", "0.8",
                 "--config", str(config),
                 "--embeddings-cache", str(tmp_path / "e.sqlite3")])  # fmt: skip
    assert code == 0
    semantic = load_config(config).cache.semantic
    assert semantic.enabled and 0.8 < semantic.threshold < 1
    assert semantic.target_precision == 0.8 and "pairs.tsv" in (semantic.calibrated_on or "")
    assert semantic.reranker is None and semantic.verifier is None
    assert semantic.verifier_threshold is None
    backups = list(tmp_path.glob("gateway.yaml.bak-*"))
    assert len(backups) == 1 and yaml.safe_load(backups[0].read_text()) == original
    assert config.stat().st_mode & 0o777 == 0o640  # written atomically, mode kept
    assert not list(tmp_path.glob(".gateway.yaml.*"))  # no temporary file left


@pytest.mark.parametrize(
    ("rule", "left"),
    [
        ("plain", {"threshold"}),
        ("verifier", {"threshold", "verifier", "verifier_threshold"}),
        ("reranker", {"threshold", "reranker"}),
    ],
)
def test_the_written_decision_is_the_one_calibrated(
    tmp_path: Path, rule: Rule, left: set[str]
) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"cache": {"semantic": {
        "threshold": 0.9, "verifier": "v.npz", "verifier_threshold": 0.5,
        "reranker": {"kind": "e5-cross-encoder", "path": "r.npz"}}}}))  # fmt: skip
    update: dict[str, object] = {"threshold": 0.8}
    update.update({"verifier": "w.npz", "verifier_threshold": 0.6} if rule == "verifier" else
                  {"reranker": {"kind": "e5-cross-encoder", "path": "s.npz"}}
                  if rule == "reranker" else {})  # fmt: skip
    backup = write_decision(config, rule, update)
    semantic = yaml.safe_load(config.read_text())["cache"]["semantic"]
    assert set(semantic) == left and semantic["threshold"] == 0.8
    assert yaml.safe_load(backup.read_text())["cache"]["semantic"]["threshold"] == 0.9


def test_a_config_that_cannot_be_written_is_refused_before_the_work(
    pairs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a name the folder takes but its temporary file and backup would not (even for root)
    config = tmp_path / ("g" * 245 + ".yaml")
    config.write_text(yaml.safe_dump({
        "channels": {"c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "lanes": {"heavy": {"channel": "c"}, "light": {"channel": "c"}},
    }))  # fmt: skip
    before = config.read_text()
    code = main(["cache", "calibrate", "--pairs", str(pairs), "--config", str(config),
                 "--embeddings-cache", str(tmp_path / "never.sqlite3")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and str(config) in err and "File name too long" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "never.sqlite3").exists()  # failed before any embedding
    with pytest.raises(OSError, match="File name too long"):
        write_decision(config, "plain", {"threshold": 0.5})
    assert config.read_text() == before and len(list(tmp_path.iterdir())) == 2


def test_bad_target_is_a_usage_error(pairs: Path) -> None:
    assert main(["cache", "eval", "--pairs", str(pairs), "--split-seed", "1",
                 "--target-precision", "1.5"]) == 2  # fmt: skip
