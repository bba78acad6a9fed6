"""The classifier's hashed character n-gram part: features, fitting, the format-2 model file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hybrid_gateway.routing.classifier import FORMAT_NGRAMS, RouterModelError, load_model
from hybrid_gateway.routing.lbfgs import minimise
from hybrid_gateway.routing.ngrams import MAX_CHARS, bucket_counts, term_rows
from hybrid_gateway.routing.outcomes import OutcomeRow
from hybrid_gateway.routing.training import FitSettings, TrainingSet, fit, scores_of
from tests.routing.fakes import DIM

NGRAMS = FitSettings(ngram_bits=12, ngram_max_n=3, ngram_l2=0.3)
# Same length, same shape, same script: only the words differ, and the embedding sees nothing.
HARD = [f"第{i:02d}题:计算定积分的值" for i in range(20)] + [
    f"question {i:02d}: prove the lemma" for i in range(20)
]
EASY = [f"第{i:02d}题:查看安装的步骤" for i in range(20)] + [
    f"question {i:02d}: reset the login" for i in range(20)
]


def blind_data(rows: list[OutcomeRow]) -> TrainingSet:
    """Every prompt gets the same vector: what the model learns comes from the text."""
    return TrainingSet.build(rows, np.ones((len(rows), DIM), np.float32) / np.sqrt(DIM))


def rows() -> list[OutcomeRow]:
    return [OutcomeRow(t, 0.0, 1.0, "hard", "synthetic") for t in HARD] + [
        OutcomeRow(t, 1.0, 1.0, "easy", "synthetic") for t in EASY
    ]


def test_ngrams_separate_what_the_embedding_cannot() -> None:
    data = blind_data(rows())
    hard = np.arange(len(data.rows)) < len(HARD)
    plain = scores_of(fit(data, "blind@1"), data)
    assert plain[hard].min() <= plain[~hard].max()  # embedding + features: no separation
    model = fit(data, "blind@1", NGRAMS)
    scores = scores_of(model, data)
    assert scores[hard].min() > scores[~hard].max()
    unseen_hard, unseen_easy = "第99题:计算定积分", "第99题:查看安装"
    vector = data.vectors[0]
    assert model.p_complex(vector, unseen_hard) > model.p_complex(vector, unseen_easy)


def test_one_decision_equals_the_batch_and_repeats_exactly() -> None:
    data = blind_data(rows())
    model = fit(data, "blind@1", NGRAMS)
    batch = scores_of(model, data)
    one = [model.p_complex(v, r.prompt) for v, r in zip(data.vectors, data.rows, strict=True)]
    assert one == pytest.approx(batch.tolist(), abs=1e-6)
    assert model.p_complex(data.vectors[0], HARD[0]) == model.p_complex(data.vectors[0], HARD[0])


def test_the_hash_is_fixed_arithmetic() -> None:
    # Pinned: a salted or platform-dependent hash would give other buckets in another process.
    buckets, counts = bucket_counts("Ab a", bits=12, max_n=2)
    assert buckets.tolist() == sorted(buckets.tolist()) and counts.sum() == 4 + 3
    assert bucket_counts("ab A", bits=12, max_n=2)[0].tolist() == buckets.tolist()
    assert bucket_counts("ab\n\t A", bits=12, max_n=2)[0].tolist() == buckets.tolist()
    assert buckets.tolist() == [434, 759, 1618, 1849, 2323, 2723]
    assert counts.tolist() == [1, 1, 1, 1, 2, 1]  # "a" twice; "ab", "b ", " a", "b", " " once


def test_long_texts_are_read_by_head_and_tail() -> None:
    middle = "x" * MAX_CHARS
    a = bucket_counts(f"start {middle} end", 12, 3)
    b = bucket_counts(f"start {middle.replace('x', 'y')} end", 12, 3)
    assert a[0].tolist() != b[0].tolist()  # the middle is read while it fits ...
    long_a = "start " + "x" * (3 * MAX_CHARS) + " end"
    long_b = "start " + "x" * MAX_CHARS + "y" * MAX_CHARS + "x" * MAX_CHARS + " end"
    assert bucket_counts(long_a, 12, 3)[0].tolist() == bucket_counts(long_b, 12, 3)[0].tolist()


def test_term_rows_products_match_dense_algebra() -> None:
    texts = ["alpha beta", "", "γδ γδ", "alpha"]
    terms = term_rows(texts, bits=6, max_n=2)
    dense = np.zeros((terms.n, terms.width))
    np.add.at(dense, (terms.rows, terms.cols), terms.values)
    w = np.random.default_rng(0).normal(size=terms.width)
    g = np.random.default_rng(1).normal(size=terms.n)
    assert terms.dot(w) == pytest.approx(dense @ w)
    assert terms.t_dot(g) == pytest.approx(dense.T @ g)
    keep = np.array([True, False, True, True])
    assert terms.subset(keep).dot(w) == pytest.approx((dense @ w)[keep])


def test_lbfgs_finds_a_quadratics_minimum() -> None:
    rng = np.random.default_rng(0)
    m = rng.normal(size=(30, 30))
    a, b = m @ m.T + np.eye(30), rng.normal(size=30)

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        return float(0.5 * x @ a @ x - b @ x), a @ x - b

    assert minimise(objective, np.zeros(30), iterations=500, tol=1e-10) == pytest.approx(
        np.linalg.solve(a, b), abs=1e-6
    )


def test_save_load_refuse(tmp_path: Path) -> None:
    data = blind_data(rows())
    model = fit(data, "blind@1", NGRAMS)
    model.save(tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz") as saved:
        assert json.loads(str(saved["meta"]))["format"] == FORMAT_NGRAMS
    loaded = load_model(tmp_path / "m.npz", "blind@1")
    assert loaded.ngrams is not None and loaded.info["ngrams"] == {"bits": 12, "max_n": 3,
                                                                   "l2": 0.3}  # fmt: skip
    assert scores_of(loaded, data) == pytest.approx(scores_of(model, data).tolist(), abs=1e-6)
    with pytest.raises(RouterModelError, match=r"'blind@1'.*'blind@2'.*retrain"):
        load_model(tmp_path / "m.npz", "blind@2")


def test_a_file_of_an_unknown_format_is_refused_by_name(tmp_path: Path) -> None:
    meta = {"format": "hybrid-gateway-router/9", "namespace": "blind@1"}
    with (tmp_path / "m.npz").open("wb") as out:
        np.savez(out, meta=np.array(json.dumps(meta)))
    with pytest.raises(RouterModelError, match=r"router/9.*router/1.*router/2.*retrain"):
        load_model(tmp_path / "m.npz", None)


def test_a_model_that_read_texts_differently_is_refused(tmp_path: Path) -> None:
    fit(blind_data(rows()), "blind@1", NGRAMS).save(tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz") as saved:
        arrays = {name: saved[name] for name in saved.files}
    meta = json.loads(str(arrays["meta"]))
    meta["ngrams"]["max_chars"] = MAX_CHARS * 2
    arrays["meta"] = np.array(json.dumps(meta))
    with (tmp_path / "m.npz").open("wb") as out:
        np.savez(out, **arrays)
    with pytest.raises(RouterModelError, match="read from texts differently"):
        load_model(tmp_path / "m.npz", "blind@1")
