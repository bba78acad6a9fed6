from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from hybrid_gateway.config import parse_config
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.routing.build import build_router, default_model_path
from hybrid_gateway.routing.classifier import RouterModelError, load_model
from hybrid_gateway.routing.heads import LinearHead
from hybrid_gateway.routing.training import TrainingSet, out_of_fold_scores, prompt_folds
from tests.routing.fakes import WordHashEmbedder
from tests.routing.helpers import EASY, HARD, synthetic_rows, trained_model
from tests.test_config import minimal


def test_learns_which_questions_need_the_heavy_model() -> None:
    embedder = WordHashEmbedder()
    model = trained_model(embedder)
    hard_text = "prove the theorem about prime ideals in ring number 99 rigorously"
    easy_text = "how do i install the client on laptop number 99"
    hard = model.p_complex(embedder._one(hard_text), hard_text)
    easy = model.p_complex(embedder._one(easy_text), easy_text)
    assert hard > 0.8 and easy < 0.6  # ties (both right) sit near 0.5, heavy-only wins above


def test_save_load_round_trip(tmp_path: Path) -> None:
    embedder = WordHashEmbedder()
    model = trained_model(embedder, tmp_path / "m.npz")
    loaded = load_model(tmp_path / "m.npz", embedder.namespace)
    v = embedder._one(HARD[0])
    assert loaded.p_complex(v, HARD[0]) == pytest.approx(model.p_complex(v, HARD[0]), abs=1e-6)
    assert loaded.info["rows"] == len(HARD) + len(EASY)


def test_fits_equal_at_float32_write_the_same_bytes(tmp_path: Path) -> None:
    """The shipped model reproduces byte for byte though embeddings computed in another batch
    order move the float64 fit in its 12th digit: every stored number is float32."""
    model = trained_model(WordHashEmbedder())
    head = model.head
    assert isinstance(head, LinearHead)
    nudged = dataclasses.replace(model, head=dataclasses.replace(head, bias=head.bias + 1e-12))
    model.save(tmp_path / "a.npz")
    nudged.save(tmp_path / "b.npz")
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()


def test_a_model_refuses_another_embedder_version(tmp_path: Path) -> None:
    trained_model(WordHashEmbedder(version="1"), tmp_path / "m.npz")
    with pytest.raises(RouterModelError, match=r"word-hash@1.*word-hash@2"):
        load_model(tmp_path / "m.npz", "word-hash@2")
    config = parse_config(minimal(routing={"classifier": {"model": str(tmp_path / "m.npz")}}))
    with pytest.raises(ConfigError) as info:
        build_router(config, config_path=None, embedder=WordHashEmbedder(version="2"))
    assert info.value.field == "routing.classifier.model"
    assert "retrain" in info.value.expected


def test_not_a_model_file(tmp_path: Path) -> None:
    (tmp_path / "x.npz").write_bytes(b"not a model")
    with pytest.raises(RouterModelError, match="not a readable router model"):
        load_model(tmp_path / "x.npz", None)


def test_the_shipped_model_names_its_embedder_and_training_mix() -> None:
    model = load_model(default_model_path(), None)
    assert model.namespace.startswith("multilingual-e5-small")
    assert model.dim == 384
    sources = model.info["sources"]
    assert isinstance(sources, dict) and "mmlu_dev" in sources and len(sources) >= 4
    assert model.info["combine"] == "per-source models, sqrt(rows) weights"


def test_folds_group_repeated_prompts() -> None:
    prompts = ["a", "b", "a", "c", "b", "a"] * 5
    folds = prompt_folds(prompts, 5)
    for text in set(prompts):
        assert len({f for p, f in zip(prompts, folds, strict=True) if p == text}) == 1


def test_out_of_fold_scores_never_see_their_row() -> None:
    embedder = WordHashEmbedder()
    rows = synthetic_rows()
    data = TrainingSet.build(rows, embedder.embed([r.prompt for r in rows]))
    scores = out_of_fold_scores(data, embedder.namespace, k=3)
    hard = np.array([r.strong > r.weak for r in rows])
    assert scores[hard].min() > scores[~hard].max()
