"""The learned pair verifier: features, training, the model file, and its place in the decision."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hybrid_gateway.cache.semantic.cache import CacheBounds, Namespace, SemanticCache
from hybrid_gateway.cache.semantic.calibrate import roc_auc
from hybrid_gateway.cache.semantic.cross_encoder import pair_digest
from hybrid_gateway.cache.semantic.decision import DecisionRule, VerifierCheck
from hybrid_gateway.cache.semantic.evaluate import (
    INNER_SEED,
    ScoredPairs,
    dev_halves,
    evaluate,
    inner_seed,
    unseen,
)
from hybrid_gateway.cache.semantic.hygiene import NoiseStripper
from hybrid_gateway.cache.semantic.pairs import Pair, split_pairs
from hybrid_gateway.cache.semantic.stage import SemanticStage
from hybrid_gateway.cache.semantic.verifier import (
    LEXICAL_NAMES,
    PairVerifier,
    VerifierError,
    lexical_features,
    load_verifier,
    pair_features,
)
from hybrid_gateway.cache.semantic.verifier_train import TrainSettings, train_verifier
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.types import ChatRequest, RequestRecord, Usage
from tests.embedding.fakes import AsyncHashingEmbedder, hashed_vector

NS = "hashing@1"
DIM = hashed_vector("x").shape[0]


def feature(name: str, a: str, b: str) -> float:
    return lexical_features(a, b)[LEXICAL_NAMES.index(name)]


def test_lexical_features_are_symmetric_and_catch_the_traps() -> None:
    a, b = "转账限额是5000吗", "转账限额是50000吗"
    assert lexical_features(a, b) == lexical_features(b, a)
    assert feature("guard_numbers", a, b) == 1.0
    assert feature("guard_negation", "花呗怎么还款", "花呗怎么不能还款") == 1.0
    assert feature("equal_normalised", "How do I reset it?", "how do i reset it") == 1.0
    assert feature("bigram_jaccard", "怎么修改登录密码", "今天天气怎么样") < 0.2
    assert feature("length_ratio", "abcd", "ab") == 0.5


def test_pair_features_have_one_row_per_pair() -> None:
    texts = ["怎么修改密码", "How do I reset my password?"]
    vectors = np.stack([hashed_vector(t) for t in texts])
    features = pair_features(texts, texts[::-1], vectors, vectors[::-1])
    assert features.shape == (2, 2 * DIM + 1 + len(LEXICAL_NAMES))
    assert features[0, 2 * DIM] == pytest.approx(float(vectors[0] @ vectors[1]), abs=1e-6)


def separable(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Labels that depend on two of twenty features through a non-linear rule, plus noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 20))
    y = (x[:, 0] + 0.5 * x[:, 1] ** 2 + 0.3 * rng.normal(size=n)) > 0.5
    return x, y


@pytest.mark.parametrize("hidden", [0, 16])
def test_training_learns_a_rule_that_holds_on_new_rows(hidden: int) -> None:
    x, y = separable(1200, seed=1)
    x_new, y_new = separable(600, seed=2)
    result = train_verifier(x, y, namespace=NS, settings=TrainSettings(hidden=hidden))
    assert roc_auc(result.model.scores(x_new), y_new) > 0.85
    assert 0 < result.epochs <= TrainSettings().max_epochs
    again = train_verifier(x, y, namespace=NS, settings=TrainSettings(hidden=hidden))
    assert np.array_equal(again.model.scores(x_new), result.model.scores(x_new))


def test_early_stopping_keeps_the_weights_that_generalise() -> None:
    # pure noise: nothing to learn, so the inner split stops training early
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(300, 50)), rng.random(300) > 0.5
    result = train_verifier(x, y, namespace=NS, settings=TrainSettings(hidden=16, patience=20))
    assert result.epochs < TrainSettings().max_epochs


def cosine_verifier(cut: float = 0.95) -> PairVerifier:
    """A hand-made model: score > 0.5 exactly when the cosine feature is above ``cut``."""
    d = 2 * DIM + 1 + len(LEXICAL_NAMES)
    w2 = np.zeros(d)
    w2[2 * DIM] = 200.0
    return PairVerifier(namespace=NS, mean=np.zeros(d), scale=np.ones(d), w1=np.zeros((0, 0)),
                        b1=np.zeros(0), w2=w2, b2=-200.0 * cut, trained_on="hand")  # fmt: skip


def test_model_file_round_trip_and_namespace_refusal(tmp_path: Path) -> None:
    x, y = separable(300, seed=4)
    model = train_verifier(x, y, namespace=NS, settings=TrainSettings(hidden=8),
                           trained_on="synthetic").model  # fmt: skip
    path = tmp_path / "m" / "verifier.npz"
    model.save(path)
    loaded = load_verifier(path, NS)
    assert loaded.trained_on == "synthetic" and loaded.namespace == NS
    assert np.allclose(loaded.scores(x), model.scores(x))
    with pytest.raises(VerifierError, match="trained on embeddings of hashing@1"):
        load_verifier(path, "other-model@2")
    (tmp_path / "junk.npz").write_bytes(b"not a model")
    with pytest.raises(VerifierError, match="not a verifier model file"):
        load_verifier(tmp_path / "junk.npz")


def test_decision_with_a_verifier_names_it_and_fails_closed() -> None:
    rule = DecisionRule(threshold=-1.0, guards=("numbers", "negation"),
                        verifier=VerifierCheck(cosine_verifier(), 0.5))  # fmt: skip
    q = "how do I reset my password"
    v = hashed_vector(q)
    same = rule.judge(q, q + "?", 1.0, (v, v))
    assert same.hit and same.passed[-1] == "verifier"
    other = hashed_vector("what is the capital of Spain")
    assert rule.judge(q, "what is the capital of Spain", 0.2, (v, other)).failed == ("verifier",)
    assert rule.judge(q, q, 1.0).failed == ("verifier",)  # no vectors: never a hit
    # a guard veto is reported as such; the verifier is not asked
    vetoed = rule.judge("限额是5000吗", "限额是50000吗", 1.0, (v, v))
    assert vetoed.failed == ("numbers",)


async def test_cache_lookup_hands_both_vectors_to_the_verifier() -> None:
    cache = SemanticCache(
        bounds=CacheBounds(ttl_s=60, max_entries=10, max_bytes=10_000_000),
        rule=DecisionRule(threshold=-1.0, verifier=VerifierCheck(cosine_verifier(0.99), 0.5)),
        clock=ManualClock(), epoch=1_000_000.0,
    )  # fmt: skip
    ns = Namespace("tenant:a", NS)
    q = "how do I reset my password"
    await cache.put(ns, "b", q, hashed_vector(q), b"answer", Usage(1, 1))
    assert (await cache.lookup(ns, "b", q, hashed_vector(q))).hit
    near = "how do I reset my passwords please"
    found = await cache.lookup(ns, "b", near, hashed_vector(near))
    assert not found.hit and found.verdict is not None and found.verdict.failed == ("verifier",)
    await cache.aclose()


def scored(n: int, seed: int) -> ScoredPairs:
    rng = np.random.default_rng(seed)
    pairs, a, b = [], [], []
    for i in range(n):
        same = bool(rng.random() < 0.5)
        text = f"question number {i} about topic {rng.integers(1000)}"
        va = hashed_vector(text)
        noise = rng.normal(scale=0.02 if same else 0.08, size=va.shape).astype(np.float32)
        vb = (va + noise) / np.linalg.norm(va + noise)
        pairs.append(Pair(text, text if same else text + " not", same))
        a.append(va)
        b.append(vb)
    return ScoredPairs.of(pairs, np.stack(a), np.stack(b))


def test_eval_reports_the_verifier_rule_next_to_the_others() -> None:
    dev, test = scored(400, seed=5), scored(400, seed=6)
    fit, calib = dev_halves(dev)
    assert len(fit.pairs) + len(calib.pairs) == len(dev.pairs)
    assert not {id(p) for p in fit.pairs} & {id(p) for p in calib.pairs}
    report = evaluate(dev, test, target=0.9, verifier=True, namespace=NS)
    assert report.verifier is not None
    out = report.as_json()["verifier"]
    assert isinstance(out, dict)
    for key in ("threshold", "precision", "recall", "auc", "n", "best_recall"):
        assert key in out
    assert out["n"] == 400 and out["auc"] > 0.95 and out["precision"] >= 0.85


async def test_stage_records_the_verifier_among_the_checks() -> None:
    embedder = AsyncHashingEmbedder()
    rule = DecisionRule(threshold=-1.0, guards=(),
                        verifier=VerifierCheck(cosine_verifier(0.99), 0.5))  # fmt: skip
    cache = SemanticCache(bounds=CacheBounds(3600, 100, 10_000_000), rule=rule,
                          clock=ManualClock())  # fmt: skip
    stage = SemanticStage(cache, embedder, stripper=NoiseStripper(), shared_scopes={})
    stored = RequestRecord(request_id="r1", started_at=0.0)
    stage.prepare(chat("How do I reset my password?"), stored)
    await stage.store(stored, b"{}", Usage(1, 1))
    again = RequestRecord(request_id="r2", started_at=0.0)
    stage.prepare(chat("How do I reset my password?"), again)
    assert await stage.lookup(again) is not None
    assert again.extra["cache_checks"] == "threshold,verifier"
    near = RequestRecord(request_id="r3", started_at=0.0)
    stage.prepare(chat("How do I reset my passwords, please?"), near)
    assert await stage.lookup(near) is None
    assert near.extra["cache_checks"] == "threshold,!verifier"
    await stage.aclose()


def chat(question: str) -> ChatRequest:
    messages = [{"role": "user", "content": question}]
    return ChatRequest("auto", messages, False, False, {"model": "auto", "messages": messages})


def test_the_inner_split_never_uses_the_outer_seed() -> None:
    # the seeds of the published figures keep their inner split
    assert inner_seed(None) == inner_seed(7) == inner_seed(8) == inner_seed(9) == INNER_SEED
    assert inner_seed(INNER_SEED) != INNER_SEED
    everything, test = scored(600, seed=5), scored(300, seed=6)
    first, _ = split_pairs(everything.pairs, seed=INNER_SEED)
    chosen = {id(p) for p in first}
    dev = everything.subset(
        np.array([i for i, p in enumerate(everything.pairs) if id(p) in chosen], dtype=np.intp)
    )
    assert list(dev_halves(dev, 7)[0].pairs) == list(dev_halves(dev)[0].pairs)
    fit, calib = dev_halves(dev, INNER_SEED)  # the first half of that very split
    assert len(fit.pairs) > 50 and len(calib.pairs) > 50
    report = evaluate(dev, test, target=0.9, verifier=True, namespace=NS, split_seed=INNER_SEED)
    assert report.verifier is not None and report.verifier.target_met


def test_the_model_file_keeps_its_training_pairs(tmp_path: Path) -> None:
    seen = replace(cosine_verifier(), trained_pairs=frozenset({pair_digest("a", "b")}))
    seen.save(tmp_path / "seen.npz")
    loaded = load_verifier(tmp_path / "seen.npz")
    assert loaded.was_trained_on("b", "a") and not loaded.was_trained_on("a", "c")
    replace(seen, trained_pairs=frozenset()).save(tmp_path / "none.npz")
    assert load_verifier(tmp_path / "none.npz").trained_pairs == frozenset()
    cosine_verifier().save(tmp_path / "old.npz")  # no digests: unknown, not "none"
    old = load_verifier(tmp_path / "old.npz")
    assert old.trained_pairs is None and not old.was_trained_on("a", "b")


def test_a_given_verifier_is_calibrated_and_measured_without_its_training_pairs() -> None:
    dev, test = scored(300, seed=5), scored(300, seed=6)
    digests = frozenset(pair_digest(p.a, p.b) for p in dev.pairs[:100])
    model = replace(cosine_verifier(), trained_pairs=digests)
    expected = sum(model.was_trained_on(p.a, p.b) for p in [*dev.pairs, *test.pairs])
    report = evaluate(dev, test, target=0.9, model=model)
    out = report.as_json()["verifier"]
    assert isinstance(out, dict) and out["excluded"] == expected >= 100
    assert out["n"] == len(unseen(test, model).pairs)
    unknown = evaluate(dev, test, target=0.9, model=cosine_verifier()).as_json()["verifier"]
    assert isinstance(unknown, dict) and unknown["excluded"] is None and unknown["n"] == 300
    everything = replace(model, trained_pairs=frozenset(pair_digest(p.a, p.b) for p in dev.pairs))
    with pytest.raises(VerifierError, match="every DEV pair"):
        evaluate(dev, test, target=0.9, model=everything)
