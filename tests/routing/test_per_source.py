"""Per-source fitting: a model learns what makes a question harder within each source, not
which source it comes from (routing/training.py, ``FitSettings.per_source``)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hybrid_gateway.routing.classifier import ClassifierModel
from hybrid_gateway.routing.outcomes import OutcomeRow
from hybrid_gateway.routing.training import FitSettings, TrainingSet, fit, scores_of
from tests.routing.fakes import WordHashEmbedder

POOLED = FitSettings(per_source=False)


def _rows(source: str, word: str, weak: float, strong: float, n: int) -> list[OutcomeRow]:
    return [OutcomeRow(f"{source} item {i} {word}", weak, strong, "c", source) for i in range(n)]


def _confounded() -> list[OutcomeRow]:
    # exam: every question needs the heavy model or ties; a tricky one always needs it.
    # chat: nothing needs the heavy model much; a tricky one ties, a plain one is light's.
    # Between the sources "exam" predicts the target best; within each, "tricky" does.
    return (
        _rows("exam", "tricky", 0.0, 1.0, 40)
        + _rows("exam", "plain", 0.0, 1.0, 30)
        + _rows("exam", "plain", 1.0, 1.0, 10)
        + _rows("chat", "tricky", 1.0, 1.0, 40)
        + _rows("chat", "plain", 1.0, 0.0, 40)
    )


def _fit(rows: list[OutcomeRow], settings: FitSettings) -> tuple[ClassifierModel, TrainingSet]:
    embedder = WordHashEmbedder()
    data = TrainingSet.build(rows, embedder.embed([r.prompt for r in rows]))
    return fit(data, embedder.namespace, settings), data


def _p(model: ClassifierModel, text: str) -> float:
    return model.p_complex(WordHashEmbedder()._one(text), text)


def _ranks(x: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    return np.argsort(np.argsort(x, kind="stable"), kind="stable")


def test_per_source_learns_within_source_hardness_not_the_source() -> None:
    per_source, _ = _fit(_confounded(), FitSettings())
    pooled, _ = _fit(_confounded(), POOLED)
    chat_tricky, exam_plain = "chat item 999 tricky", "exam item 999 plain"
    assert _p(pooled, chat_tricky) < _p(pooled, exam_plain)  # pooled: the source decides
    assert _p(per_source, chat_tricky) > _p(per_source, exam_plain) + 0.05
    for source in ("exam", "chat"):
        tricky, plain = f"{source} item 999 tricky", f"{source} item 999 plain"
        assert _p(per_source, tricky) > _p(per_source, plain)
    assert per_source.info["combine"] == "per-source models, sqrt(rows) weights"
    assert pooled.info["combine"] == "pooled"


def test_one_source_ranks_as_the_pooled_fit() -> None:
    rows = [r for r in _confounded() if r.source == "exam"]
    per_source, data = _fit(rows, FitSettings())
    pooled, _ = _fit(rows, POOLED)
    a, b = scores_of(per_source, data), scores_of(pooled, data)
    assert np.corrcoef(_ranks(a), _ranks(b))[0, 1] > 0.999


def test_a_source_of_ties_only_changes_no_ranking() -> None:
    chat = [r for r in _confounded() if r.source == "chat"]
    ties = _rows("faq", "install", 1.0, 1.0, 30)
    with_ties, data = _fit(chat + ties, FitSettings())
    alone, _ = _fit(chat, FitSettings())
    only_chat = data.subset(np.array([r.source == "chat" for r in data.rows]))
    a, b = scores_of(with_ties, only_chat), scores_of(alone, only_chat)
    assert np.corrcoef(_ranks(a), _ranks(b))[0, 1] > 0.999
    assert with_ties.info["sources"] == {"chat": 80, "faq": 30}


def test_ngrams_are_always_fitted_pooled() -> None:
    model, _ = _fit(_confounded(), FitSettings(ngram_bits=10, ngram_max_n=3))
    assert model.ngrams is not None and model.info["combine"] == "pooled"
