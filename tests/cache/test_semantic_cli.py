"""`hybrid-gateway cache eval` and `cache calibrate` on a small labelled file, with the real
bundled embedder (a few dozen texts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

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


@pytest.fixture
def pairs(tmp_path: Path) -> Path:
    path = tmp_path / "pairs.tsv"
    rows = [f"{a}\t{b}\t1" for a, b in SAME] + [f"{a}\t{b}\t0" for a, b in DIFFERENT]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_eval_prints_both_rules_and_writes_the_curve(
    pairs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["cache", "eval", "--pairs", str(pairs), "--calibrate-on", str(pairs),
                 "--target-precision", "0.8", "--json", "--curve-out", str(tmp_path / "curve"),
                 "--embeddings-cache", str(tmp_path / "emb.sqlite3")])  # fmt: skip
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    for key in ("threshold", "precision", "recall", "auc", "n"):
        assert key in report and key in report["plain"] and key in report["decision"]
    assert report["n"] == len(SAME) + len(DIFFERENT)
    assert report["precision"] >= 0.8 and report["recall"] > 0.5
    assert report["decision"]["auc"] > 0.8
    assert "numbers" in report["guards"] or "negation" in report["guards"]
    assert (tmp_path / "curve" / "pairs-curve.csv").read_text().startswith("rule,threshold")
    assert (tmp_path / "curve" / "pairs-curve.png").stat().st_size > 1000


def test_calibrate_writes_the_decision_into_the_config(pairs: Path, tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    original = {
        "channels": {"c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "lanes": {"heavy": {"channel": "c"}, "light": {"channel": "c"}},
        "cache": {"semantic": {"enabled": True}},
    }
    config.write_text(yaml.safe_dump(original))
    code = main(["cache", "calibrate", "--pairs", str(pairs), "--target-precision", "0.8",
                 "--config", str(config),
                 "--embeddings-cache", str(tmp_path / "e.sqlite3")])  # fmt: skip
    assert code == 0
    semantic = load_config(config).cache.semantic
    assert semantic.enabled and 0.8 < semantic.threshold < 1
    assert semantic.target_precision == 0.8 and "pairs.tsv" in (semantic.calibrated_on or "")
    backups = list(tmp_path.glob("gateway.yaml.bak-*"))
    assert len(backups) == 1 and yaml.safe_load(backups[0].read_text()) == original


def test_bad_target_is_a_usage_error(pairs: Path) -> None:
    assert main(["cache", "eval", "--pairs", str(pairs), "--split-seed", "1",
                 "--target-precision", "1.5"]) == 2  # fmt: skip
