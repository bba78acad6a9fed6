"""`cache train-verifier`, the verifier rule of `cache eval`, `cache calibrate --verifier` and the
config keys they write, with the real bundled embedder on a small labelled file."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from hybrid_gateway.cache.semantic.build import build_verifier
from hybrid_gateway.cache.semantic.pairs import load_pairs, split_pairs
from hybrid_gateway.cache.semantic.settings import SemanticCacheConfig
from hybrid_gateway.cache.semantic.verifier import load_verifier
from hybrid_gateway.cli import main
from hybrid_gateway.config import load_config
from hybrid_gateway.errors import ConfigError
from tests.cache.test_semantic_cli import DIFFERENT, SAME, no_nan, write_pairs


@pytest.fixture
def pairs(tmp_path: Path) -> Path:
    return write_pairs(tmp_path / "pairs.tsv")


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


def eval_args(pairs: Path, tmp_path: Path) -> list[str]:
    """`cache eval` of other test pairs, calibrated on ``pairs``, at target 0.7, as JSON."""
    test = write_pairs(tmp_path / "test.tsv", "!")
    return ["cache", "eval", "--pairs", str(test), "--calibrate-on", str(pairs),
            "--target-precision", "0.7", "--json", *cache_args(tmp_path)]  # fmt: skip


def test_eval_reports_a_verifier_rule_trained_on_dev_or_given(
    pairs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = eval_args(pairs, tmp_path)
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    for key in ("threshold", "precision", "recall", "auc", "n", "best_recall", "target_met"):
        assert key in report["verifier"]
    assert report["verifier"]["n"] == len(SAME) + len(DIFFERENT)
    assert report["verifier"]["excluded"] == 0  # trained here, on the other half of DEV
    model = train(write_pairs(tmp_path / "other.tsv", "。"), tmp_path)  # other pairs
    capsys.readouterr()
    assert main([*args, "--verifier", str(model)]) == 0
    given = json.loads(capsys.readouterr().out)["verifier"]
    assert given["auc"] > 0.9 and given["recall"] > 0.5 and given["excluded"] == 0


def test_eval_leaves_the_verifiers_training_pairs_out(
    pairs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = eval_args(pairs, tmp_path)
    half = train(pairs, tmp_path, "--split-seed", "3")  # trained on half of DEV
    capsys.readouterr()
    assert main([*args, "--verifier", str(half)]) == 0
    given = json.loads(capsys.readouterr().out, parse_constant=no_nan)["verifier"]
    seen = len(split_pairs(load_pairs(pairs), seed=3)[0])
    assert 0 < seen < len(SAME) + len(DIFFERENT) and given["excluded"] == seen
    assert given["n"] == len(SAME) + len(DIFFERENT)  # TEST holds none of them
    # trained on all of DEV: nothing is left to calibrate its threshold on
    every = train(pairs, tmp_path)
    assert main([*args, "--verifier", str(every)]) == 2
    assert "every DEV pair is one the verifier was trained on" in capsys.readouterr().err
    # ... and `train-verifier --split-seed S` then `eval --split-seed S` is that case too
    assert main(["cache", "eval", "--pairs", str(pairs), "--split-seed", "3", "--verifier",
                 str(half), *cache_args(tmp_path)]) == 2  # fmt: skip


def test_an_older_verifier_file_is_read_with_a_warning(
    pairs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = load_verifier(train(write_pairs(tmp_path / "other.tsv", "。"), tmp_path))
    assert model.trained_pairs is not None
    assert len(model.trained_pairs) == len(SAME) + len(DIFFERENT)
    old = tmp_path / "old.npz"
    replace(model, trained_pairs=None).save(old)  # as written before the digests were kept
    assert load_verifier(old).trained_pairs is None
    capsys.readouterr()
    code = main(["cache", "eval", "--pairs", str(write_pairs(tmp_path / "test.tsv", "!")),
                 "--calibrate-on", str(pairs), "--target-precision", "0.7", "--json",
                 "--verifier", str(old), *cache_args(tmp_path)])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)["verifier"]["excluded"] is None
    assert "does not record its training pairs" in captured.err


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
    model = train(write_pairs(tmp_path / "other.tsv", "。"), tmp_path)
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({
        "channels": {"c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "lanes": {"heavy": {"channel": "c"}, "light": {"channel": "c"}},
        # a leftover reranker would be asked about every candidate (threshold -1): it goes
        "cache": {"semantic": {"enabled": True,
                               "reranker": {"kind": "e5-cross-encoder", "path": "r.npz"}}},
    }))  # fmt: skip
    code = main(["cache", "calibrate", "--pairs", str(pairs), "--target-precision", "0.7",
                 "--config", str(config), "--verifier", str(model),
                 *cache_args(tmp_path)])  # fmt: skip
    assert code == 0
    semantic = load_config(config).cache.semantic
    assert semantic.verifier == "models/verifier.npz" and semantic.guards == ()
    assert semantic.threshold == -1.0 and semantic.verifier_threshold is not None
    assert semantic.reranker is None
    check = build_verifier(semantic, config, load_verifier(model).namespace)
    assert check is not None and check.threshold == semantic.verifier_threshold
    with pytest.raises(ConfigError, match=r"cache\.semantic\.verifier"):
        build_verifier(semantic, config, "another@1")
    # calibrating the cosine rule again takes the verifier out
    assert main(["cache", "calibrate", "--pairs", str(pairs), "--target-precision", "0.7",
                 "--config", str(config), *cache_args(tmp_path)]) == 0  # fmt: skip
    assert load_config(config).cache.semantic.verifier is None


def test_calibrate_leaves_the_verifiers_training_pairs_out(
    pairs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({
        "channels": {"c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "lanes": {"heavy": {"channel": "c"}, "light": {"channel": "c"}},
    }))  # fmt: skip
    args = ["cache", "calibrate", "--pairs", str(pairs), "--target-precision", "0.5",
            "--config", str(config), *cache_args(tmp_path)]  # fmt: skip
    half = train(pairs, tmp_path, "--split-seed", "3")
    capsys.readouterr()
    main([*args, "--verifier", str(half)])
    seen = len(split_pairs(load_pairs(pairs), seed=3)[0])
    assert f"{seen} of the {len(SAME) + len(DIFFERENT)} pairs are its training pairs" in (
        capsys.readouterr().err
    )
    assert main([*args, "--verifier", str(train(pairs, tmp_path))]) == 2
    assert "every DEV pair is one the verifier was trained on" in capsys.readouterr().err


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
