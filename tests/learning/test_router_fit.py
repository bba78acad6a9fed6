"""The router from audited traffic: labels -> rows, the fit pulled to the shipped model, and the
replay that refuses a candidate worse than the live model."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hybrid_gateway.cli import main
from hybrid_gateway.learning.labels import Label
from hybrid_gateway.learning.router_fit import (
    fit_with_prior,
    outcome_rows,
    replay,
    train_candidate,
)
from hybrid_gateway.routing.build import default_model_path
from hybrid_gateway.routing.classifier import ClassifierModel, load_model
from hybrid_gateway.routing.heads import LinearHead
from hybrid_gateway.routing.outcomes import OutcomeRow
from hybrid_gateway.routing.training import TrainingSet, scores_of, soft_targets


def label(n: int, verdict: str | None, kind: str = "router", prompt: str | None = "q") -> Label:
    return Label(f"r{n}", float(n), "acme", kind, None, None, "light", "heavy", verdict, prompt)


def test_labels_become_outcome_rows_oldest_first() -> None:
    labels = [label(3, "b_worse"), label(1, "a_worse"), label(2, "equivalent"), label(4, None),
              label(5, "a_worse", kind="cache"), label(6, "a_worse", prompt=None)]  # fmt: skip
    rows = outcome_rows(labels)
    assert [(r.weak, r.strong) for r in rows] == [(0.0, 1.0), (1.0, 1.0), (1.0, 0.0)]
    assert {r.source for r in rows} == {"audits"}


@pytest.fixture(scope="module")
def prior() -> ClassifierModel:
    return load_model(default_model_path(), None)


def synthetic(prior: ClassifierModel, n: int, seed: int) -> TrainingSet:
    """Questions whose need for the heavy lane follows one direction of the embedding space,
    one the shipped model knows nothing of."""
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, prior.dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    heavy = vectors[:, 5] > 0
    texts = [f"question {i} " + "x" * int(rng.integers(5, 80)) for i in range(n)]
    weak = np.where(heavy, 0.0, 1.0)
    rows = [OutcomeRow(t, float(w), 1.0, "", "audits") for t, w in zip(texts, weak, strict=True)]
    return TrainingSet.build(rows, vectors)


def test_the_fit_stays_near_the_prior_with_a_strong_pull(prior: ClassifierModel) -> None:
    data = synthetic(prior, 300, 1)
    near = fit_with_prior(data, prior, l2=1e6)
    assert isinstance(near.head, LinearHead) and isinstance(prior.head, LinearHead)
    assert np.allclose(near.head.embed_weights, prior.head.embed_weights, atol=1e-3)
    assert near.namespace == prior.namespace
    loose = fit_with_prior(data, prior, l2=1.0)
    assert isinstance(loose.head, LinearHead)
    assert loose.head.embed_weights[5] > prior.head.embed_weights[5] + 1.0  # learned it


def test_the_replay_accepts_a_better_candidate_and_refuses_a_bad_one(
    prior: ClassifierModel, tmp_path: Path
) -> None:
    train, held_out = synthetic(prior, 400, 2), synthetic(prior, 200, 3)
    candidate = fit_with_prior(train, prior, l2=1.0)
    better = replay(prior, candidate, held_out)
    assert better.accepted and better.candidate_area > better.live_area + 0.05
    assert "accepted" in better.describe()
    assert isinstance(candidate.head, LinearHead)
    flipped = LinearHead(-candidate.head.embed_weights, -candidate.head.feature_weights,
                         -candidate.head.bias)  # fmt: skip
    bad = replay(prior, replace(candidate, head=flipped), held_out)  # deliberately worse
    assert not bad.accepted and bad.candidate_area < bad.live_area
    assert replay(prior, prior, held_out).accepted  # as good as the live model: accepted
    candidate.save(tmp_path / "c.npz")
    assert load_model(tmp_path / "c.npz", prior.namespace).dim == prior.dim


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "g.yaml"
    config.write_text(
        "channels: {c: {base_url: 'http://127.0.0.1:9/v1', model: m}}\n"
        "lanes: {light: {channel: c}, heavy: {channel: c}}\n"
        f"server: {{request_log: {{path: {tmp_path / 'r.sqlite3'}}}}}\n"
    )
    out = str(tmp_path / "m.npz")
    assert main(["router", "train", "--from-log", "--config", str(config), "--out", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "prompts" in err
    config.write_text(config.read_text().replace("r.sqlite3}", "r.sqlite3, prompts: full}"))
    assert main(["router", "train", "--from-log", "--config", str(config), "--out", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("no request log" in err or "usable router audits" in err)
    assert main(["router", "train", "--from-log", "--out", out]) == 2
    assert "--config" in capsys.readouterr().err
    folds = ["router", "train", "--from-log", "--config", str(config), "--out", out, "--folds"]
    assert main([*folds, "1"]) == 2
    assert "--folds must be 0 or between 2 and 20, got 1" in capsys.readouterr().err


def test_the_fit_converges_on_traffic_where_most_audits_find_both_answers_equivalent(
    prior: ClassifierModel,
) -> None:
    """The default workload's audits: 91 % ``equivalent`` (soft target 0.5), 9 % only the heavy
    answer good, 1 % only the light one.  An undamped Newton step from the prior overshot there
    and diverged (every score 0 or 1); the damped fit lowers the loss and keeps a ranking."""
    rng = np.random.default_rng(7)
    n = 600
    vectors = rng.normal(size=(n, prior.dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    kind = rng.choice(3, size=n, p=[0.90, 0.09, 0.01])  # equivalent, a_worse, b_worse
    weak = np.where(kind == 1, 0.0, 1.0)
    strong = np.where(kind == 2, 0.0, 1.0)
    # Chinese questions of 1-900 characters: text features far from the prior's training mean
    texts = [f"问题 {i}: " + "怎么办" * int(rng.integers(1, 300)) for i in range(n)]
    rows = [OutcomeRow(t, float(w), float(s), "", "audits")
            for t, w, s in zip(texts, weak, strong, strict=True)]  # fmt: skip
    data = TrainingSet.build(rows, vectors)
    fitted = fit_with_prior(data, prior, l2=30.0)
    scores = scores_of(fitted, data)
    assert scores.min() > 0.02 and scores.max() < 0.98  # nothing saturated
    assert len(np.unique(scores.round(6))) > n // 2  # a ranking, not two values
    assert abs(float(scores.mean()) - float(soft_targets(data).mean())) < 0.05  # the base rate


def test_a_cross_fitted_candidate_is_the_mean_of_its_folds_and_replays_every_audit(
    prior: ClassifierModel,
) -> None:
    data = synthetic(prior, 300, 4)
    cross = train_candidate(data, prior, holdout=0.3, l2=1.0, folds=5)
    split = train_candidate(data, prior, holdout=0.3, l2=1.0)
    assert (cross.replay.labels, cross.trained, len(cross.held_out.rows)) == (300, 300, 300)
    assert (split.replay.labels, split.trained) == (90, 210)
    assert cross.replay.accepted and cross.replay.folds == 5
    assert "each scored by the fold model that never saw it" in cross.replay.describe()
    # every audit's replay score came from the model fitted without its fold
    fold = np.arange(300) % 5
    for f in range(5):
        alone = fit_with_prior(data.subset(fold != f), prior, l2=1.0)
        seen = cross.held_out_scores[fold == f]
        assert np.allclose(seen, scores_of(alone, data.subset(fold == f)), atol=1e-6)
    # the shipped model: one linear model whose logit is the mean of the fold models' logits
    models = [fit_with_prior(data.subset(fold != f), prior, l2=1.0) for f in range(5)]
    probe = synthetic(prior, 50, 5)
    logits = [np.log(p / (1 - p)) for p in (scores_of(m, probe) for m in models)]
    mean = scores_of(cross.model, probe)
    assert np.allclose(np.log(mean / (1 - mean)), np.mean(logits, axis=0), atol=1e-3)
    assert cross.model.info["cross_fitted"] == {"folds": 5}


def test_cross_fitting_refuses_a_deliberately_bad_fit(prior: ClassifierModel) -> None:
    def negated(data: TrainingSet, live: ClassifierModel, l2: float) -> ClassifierModel:
        fitted = fit_with_prior(data, live, l2=l2)
        assert isinstance(fitted.head, LinearHead)
        head = fitted.head
        return replace(fitted, head=LinearHead(-head.embed_weights, -head.feature_weights,
                                               -head.bias))  # fmt: skip

    bad = train_candidate(synthetic(prior, 300, 6), prior, holdout=0.3, l2=1.0, fit=negated,
                          folds=5)  # fmt: skip
    assert not bad.replay.accepted and bad.replay.candidate_area < bad.replay.live_area
