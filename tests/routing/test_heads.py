"""The outcome heads (routing/heads.py, ``--target outcomes``): four outcomes per prompt, scored
by the expected gain of a heavy call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hybrid_gateway.api.schema import parse_chat_request
from hybrid_gateway.config import parse_config
from hybrid_gateway.routing.build import build_router
from hybrid_gateway.routing.classifier import FORMAT_OUTCOMES, load_model
from hybrid_gateway.routing.evaluation import router_quality
from hybrid_gateway.routing.heads import OUTCOMES, OutcomeHeads, outcome_shares
from hybrid_gateway.routing.outcomes import OutcomeRow
from hybrid_gateway.routing.training import (
    FitSettings,
    TrainingSet,
    _newton,
    _scale_shift_within,
    fit,
    outcome_table,
    scores_of,
    soft_targets,
)
from hybrid_gateway.types import RequestRecord
from tests.routing.fakes import WordHashEmbedder, with_embedding
from tests.routing.helpers import HARD, synthetic_rows
from tests.test_config import minimal

OUT = FitSettings(target="outcomes")


def test_outcome_shares_of_binary_and_graded_rows() -> None:
    shares = outcome_shares(np.array([-1.0, 0.0, 0.0, 1.0, 0.5]), np.array([0.5, 0, 1, 0.5, 0.75]))
    expected = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [0, 0.125, 0.375, 0.5]]
    assert shares == pytest.approx(np.array(expected))
    assert OUTCOMES == ("light_better", "both_wrong", "both_right", "heavy_better")


def test_outcome_table_reads_each_source_on_its_own_scale() -> None:
    rows = [
        OutcomeRow("a", 0.0, 1.0, "", "exam"),
        OutcomeRow("b", 0.0, 0.0, "", "exam"),
        OutcomeRow("c", 1.0, 1.0, "", "exam"),
        OutcomeRow("d", 9.0, 9.0, "", "judge"),  # graded 1-10: a tie near the top
        OutcomeRow("e", 1.0, 9.0, "", "judge"),  # heavy far better: gain clipped at 1
    ]
    data = TrainingSet.build(rows, WordHashEmbedder().embed([r.prompt for r in rows]))
    table = outcome_table(data, soft_targets(data))
    assert table[:3] == pytest.approx(np.array([[0, 0, 0, 1], [0, 1, 0, 0], [0, 0, 1, 0]]))
    assert table[3] == pytest.approx([0, 0, 1, 0])
    assert table[4] == pytest.approx([0, 0, 0, 1])
    assert table.sum(axis=1) == pytest.approx(np.ones(5))


class LevelEmbedder(WordHashEmbedder):
    """Puts "level NNN" at NNN/100 along one direction: the only thing that tells prompts apart
    (the texts are alike for the text features: same length, same share of digits)."""

    def _one(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, np.float32)
        v[0], v[1] = int(text.split()[-1]) / 100, 1.0
        return v


def _difficulty_ladder() -> list[OutcomeRow]:
    # Low levels are easy (both right), high ones hopeless (both wrong); the heavy model pays
    # off only in the middle of the scale.
    rows = [OutcomeRow(f"level {k:03d}", 1.0, 1.0, "", "x") for k in range(0, 30)]
    rows += [OutcomeRow(f"level {k:03d}", 0.0, 1.0, "", "x") for k in range(40, 70)]
    return rows + [OutcomeRow(f"level {k:03d}", 0.0, 0.0, "", "x") for k in range(80, 110)]


def test_outcomes_rank_the_middle_of_a_difficulty_scale_first_where_soft_cannot() -> None:
    rows = _difficulty_ladder()
    data = TrainingSet.build(rows, LevelEmbedder().embed([r.prompt for r in rows]))
    outcomes = scores_of(fit(data, "c@1", OUT), data)
    soft = scores_of(fit(data, "c@1", FitSettings()), data)
    middle = np.array([r.weak == 0.0 and r.strong == 1.0 for r in rows])
    assert outcomes[middle].min() > outcomes[~middle].max()  # every paying prompt first
    a = router_quality(outcomes, data.weak, data.strong).apgr
    b = router_quality(soft, data.weak, data.strong).apgr
    oracle = router_quality(data.strong - data.weak, data.weak, data.strong).apgr
    assert a == pytest.approx(oracle)
    assert b < oracle - 0.1, b  # a monotone logistic model must misplace one end


def test_outcome_model_learns_the_synthetic_split_and_round_trips(tmp_path: Path) -> None:
    embedder = WordHashEmbedder()
    rows = synthetic_rows()
    data = TrainingSet.build(rows, embedder.embed([r.prompt for r in rows]))
    model = fit(data, embedder.namespace, OUT)
    assert isinstance(model.head, OutcomeHeads) and model.dim == embedder.dim
    hard_text = "prove the theorem about prime ideals in ring number 99 rigorously"
    easy_text = "how do i install the client on laptop number 99"
    hard = model.p_complex(embedder._one(hard_text), hard_text)
    easy = model.p_complex(embedder._one(easy_text), easy_text)
    assert hard > easy + 0.3
    model.save(tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz") as raw:
        assert FORMAT_OUTCOMES in str(raw["meta"])
    loaded = load_model(tmp_path / "m.npz", embedder.namespace)
    v = embedder._one(HARD[0])
    assert loaded.p_complex(v, HARD[0]) == pytest.approx(model.p_complex(v, HARD[0]), abs=1e-6)
    assert loaded.info["target"] == "outcomes: P(heavy better) - P(light better)"


def test_per_source_outcome_models_and_a_source_of_ties() -> None:
    embedder = WordHashEmbedder()
    rows = synthetic_rows() + [
        OutcomeRow(f"what time is it in city {i}", 1.0, 1.0, "", "faq") for i in range(20)
    ]
    data = TrainingSet.build(rows, embedder.embed([r.prompt for r in rows]))
    model = fit(data, embedder.namespace, OUT)
    assert isinstance(model.head, OutcomeHeads)
    assert model.head.weights.shape[0] == 2  # one softmax model per source
    assert model.head.mix[0] == 0.0  # "faq" (sorted first) only ties: it has no vote
    scores = scores_of(model, data)
    hard = np.array([r.prompt in HARD for r in rows])
    assert scores[hard].min() > scores[~hard].max()


def test_all_ties_give_a_constant_model() -> None:
    embedder = WordHashEmbedder()
    rows = [OutcomeRow(f"question {i}", 1.0, 1.0, "", "x") for i in range(10)]
    data = TrainingSet.build(rows, embedder.embed([r.prompt for r in rows]))
    scores = scores_of(fit(data, embedder.namespace, OUT), data)
    assert np.ptp(scores) == 0.0


def test_outcomes_and_ngrams_do_not_mix(tmp_path: Path) -> None:
    embedder = WordHashEmbedder()
    rows = synthetic_rows()
    data = TrainingSet.build(rows, embedder.embed([r.prompt for r in rows]))
    with pytest.raises(ValueError, match="n-grams"):
        fit(data, embedder.namespace, FitSettings(target="outcomes", ngram_bits=10))
    out = subprocess.run(
        [sys.executable, "-m", "hybrid_gateway.cli", "router", "train", "--data",
         str(tmp_path / "none.csv"), "--out", str(tmp_path / "m.npz"),
         "--target", "outcomes", "--ngram-bits", "10"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 2
    assert "--target outcomes cannot be combined with --ngram-bits" in out.stderr
    assert "Traceback" not in out.stderr


async def test_the_gateway_routes_with_an_outcome_model(tmp_path: Path) -> None:
    embedder = WordHashEmbedder()
    rows = synthetic_rows()
    data = TrainingSet.build(rows, embedder.embed([r.prompt for r in rows]))
    fit(data, embedder.namespace, OUT).save(tmp_path / "m.npz")
    config = parse_config(minimal(routing={"classifier": {"model": "m.npz", "threshold": 0.6}}))
    router = build_router(config, config_path=tmp_path / "gw.yaml", embedder=embedder)
    lanes = {}
    for text in ("prove the theorem about prime ideals in ring number 99 rigorously",
                 "how do i install the client on laptop number 99"):  # fmt: skip
        body = {"model": "auto", "messages": [{"role": "user", "content": text}]}
        record = with_embedding(RequestRecord("r", 0.0), embedder, text)
        decision = await router.route(parse_chat_request(body), record, embed=True)
        assert decision.rule == "classifier"
        lanes[text.split()[0]] = decision.lane
    assert lanes == {"prove": "heavy", "how": "light"}


def test_the_scale_is_fitted_within_sources_so_offsets_between_them_cannot_reverse_it() -> None:
    # Within each source a higher score means a higher target; between them the source with
    # the higher scores has the lower targets (offsets of the averaged gains, not signal).
    rows = [OutcomeRow(f"a {i}", 0, 0, "", "a") for i in range(20)]
    rows += [OutcomeRow(f"b {i}", 0, 0, "", "b") for i in range(20)]
    data = TrainingSet.build(rows, WordHashEmbedder().embed([r.prompt for r in rows]))
    ramp = np.linspace(0.0, 1.0, 20)
    z = np.concatenate([10 + ramp, ramp])
    t = np.concatenate([0.2 + 0.1 * ramp, 0.7 + 0.1 * ramp])
    w = np.ones(40)
    pooled = _newton(np.column_stack([z, np.ones(40)]), t, w, FitSettings(l2=0.0))
    assert pooled[0] < 0  # one pooled fit reads it backwards
    scale, _ = _scale_shift_within(z, t, w, data, FitSettings())
    assert scale > 0


@pytest.mark.parametrize("target", ["soft", "outcomes"])
def test_one_file_per_label_still_ranks_and_separates(target: str) -> None:
    # A file of "complex" examples and a file of "simple" ones: neither file's targets vary, so
    # neither says anything about the scale within it (and would drive its own intercept to
    # infinity): the scale falls back to the pooled fit.
    embedder = WordHashEmbedder()
    rows = [OutcomeRow(r.prompt, r.weak, r.strong, "", "complex" if r.weak == 0 else "simple")
            for r in synthetic_rows()]  # fmt: skip
    data = TrainingSet.build(rows, embedder.embed([r.prompt for r in rows]))
    scores = scores_of(fit(data, embedder.namespace, FitSettings(target=target)), data)
    hard = np.array([r.weak == 0 for r in rows])
    assert np.isfinite(scores).all()
    assert scores[hard].min() > scores[~hard].max()
    assert scores[hard].mean() > scores[~hard].mean() + 0.3
