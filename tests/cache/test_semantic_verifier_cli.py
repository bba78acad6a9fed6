"""`cache train-verifier`, the verifier rule of `cache eval`, `cache calibrate --verifier` and the
config keys they write, with the real bundled embedder on a small labelled file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hybrid_gateway.cache.semantic.build import build_verifier
from hybrid_gateway.cache.semantic.settings import SemanticCacheConfig
from hybrid_gateway.cache.semantic.verifier import load_verifier
from hybrid_gateway.cli import main
from hybrid_gateway.config import load_config
from hybrid_gateway.errors import ConfigError
from tests.cache.test_semantic_cli import DIFFERENT, SAME


@pytest.fixture
def pairs(tmp_path: Path) -> Path:
    path = tmp_path / "pairs.tsv"
    rows = [f"{a}\t{b}\t1" for a, b in SAME] + [f"{a}\t{b}\t0" for a, b in DIFFERENT]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def cache_args(tmp_path: Path) -> list[str]:
    return ["--embeddings-cache", str(tmp_path / "emb.sqlite3")]


def train(pairs: Path, tmp_path: Path, *extra: str) -> Path:
    out = tmp_path / "models" / "verifier.npz"
    code = main(["cache", "train-verifier", "--pairs", str(pairs), "--out", str(out),
                 "--hidden", "4", *extra, *cache_args(tmp_path)])  # fmt: skip
    assert code == 0
    return out


def test_train_verifier_records_the_embedder_and_what_it_saw(
    pairs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = train(pairs, tmp_path, "--split-seed", "3")
    model = load_verifier(out)
    assert model.namespace.startswith("multilingual-e5-small")
    assert "pairs.tsv" in model.trained_on and "first half of split seed 3" in model.trained_on
    assert model.w1.shape[1] == 4
    assert "verifier for multilingual-e5-small" in capsys.readouterr().out


def test_eval_reports_a_verifier_rule_trained_on_dev_or_given(
    pairs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["cache", "eval", "--pairs", str(pairs), "--calibrate-on", str(pairs),
            "--target-precision", "0.7", "--json", *cache_args(tmp_path)]  # fmt: skip
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    for key in ("threshold", "precision", "recall", "auc", "n", "best_recall"):
        assert key in report["verifier"]
    assert report["verifier"]["n"] == len(SAME) + len(DIFFERENT)
    model = train(pairs, tmp_path)
    capsys.readouterr()
    assert main([*args, "--verifier", str(model)]) == 0
    given = json.loads(capsys.readouterr().out)["verifier"]
    assert given["auc"] > 0.9 and given["recall"] > 0.5  # its own training pairs: easy


def test_eval_refuses_a_model_of_another_embedder(
    pairs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = load_verifier(train(pairs, tmp_path))
    other = tmp_path / "other.npz"
    type(model)(**{**{f: getattr(model, f) for f in model.__slots__},
                   "namespace": "another@1"}).save(other)  # fmt: skip
    code = main(["cache", "eval", "--pairs", str(pairs), "--split-seed", "1",
                 "--verifier", str(other), *cache_args(tmp_path)])  # fmt: skip
    assert code == 2 and "another@1" in capsys.readouterr().err


def test_calibrate_with_a_verifier_writes_it_into_the_config(pairs: Path, tmp_path: Path) -> None:
    model = train(pairs, tmp_path)
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({
        "channels": {"c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "lanes": {"heavy": {"channel": "c"}, "light": {"channel": "c"}},
        "cache": {"semantic": {"enabled": True}},
    }))  # fmt: skip
    code = main(["cache", "calibrate", "--pairs", str(pairs), "--target-precision", "0.7",
                 "--config", str(config), "--verifier", str(model),
                 *cache_args(tmp_path)])  # fmt: skip
    assert code == 0
    semantic = load_config(config).cache.semantic
    assert semantic.verifier == "models/verifier.npz" and semantic.guards == ()
    assert semantic.threshold == -1.0 and semantic.verifier_threshold is not None
    check = build_verifier(semantic, config, load_verifier(model).namespace)
    assert check is not None and check.threshold == semantic.verifier_threshold
    with pytest.raises(ConfigError, match=r"cache\.semantic\.verifier"):
        build_verifier(semantic, config, "another@1")
    # calibrating the cosine rule again takes the verifier out
    assert main(["cache", "calibrate", "--pairs", str(pairs), "--target-precision", "0.7",
                 "--config", str(config), *cache_args(tmp_path)]) == 0  # fmt: skip
    assert load_config(config).cache.semantic.verifier is None


def test_train_on_one_half_calibrate_on_the_other(pairs: Path, tmp_path: Path) -> None:
    model = train(pairs, tmp_path, "--split-seed", "3")
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({
        "channels": {"c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "lanes": {"heavy": {"channel": "c"}, "light": {"channel": "c"}},
    }))  # fmt: skip
    code = main(["cache", "calibrate", "--pairs", str(pairs), "--split-seed", "3",
                 "--target-precision", "0.5", "--config", str(config), "--verifier", str(model),
                 *cache_args(tmp_path)])  # fmt: skip
    assert code == 0
    semantic = load_config(config).cache.semantic
    assert "second half of split seed 3" in (semantic.calibrated_on or "")
    assert semantic.verifier_threshold is not None and not semantic.enabled  # still off


def test_a_verifier_needs_its_threshold() -> None:
    with pytest.raises(ValueError, match="verifier_threshold"):
        SemanticCacheConfig(verifier="m.npz")
    assert SemanticCacheConfig().verifier is None  # off by default
