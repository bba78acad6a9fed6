"""Synthetic routing data with a known answer: maths proofs need the heavy model, FAQs do not."""

from __future__ import annotations

from pathlib import Path

from hybrid_gateway.routing.classifier import ClassifierModel
from hybrid_gateway.routing.outcomes import OutcomeRow
from hybrid_gateway.routing.training import TrainingSet, fit
from tests.routing.fakes import WordHashEmbedder

HARD = [f"prove the theorem about prime ideals in ring number {i} rigorously" for i in range(30)]
EASY = [f"how do i install the client on laptop number {i}" for i in range(30)]


def synthetic_rows() -> list[OutcomeRow]:
    hard = [OutcomeRow(t, 0.0, 1.0, "algebra", "synthetic") for t in HARD]
    easy = [OutcomeRow(t, 1.0, 1.0, "faq", "synthetic") for t in EASY]
    return hard + easy


def trained_model(embedder: WordHashEmbedder, path: Path | None = None) -> ClassifierModel:
    rows = synthetic_rows()
    data = TrainingSet.build(rows, embedder.embed([r.prompt for r in rows]))
    model = fit(data, embedder.namespace)
    if path is not None:
        model.save(path)
    return model
