"""routing.classifier.cascade: the static student decides when clear of the threshold, e5 else."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybrid_gateway.api.schema import parse_chat_request
from hybrid_gateway.config import parse_config
from hybrid_gateway.embedding.base import Vector
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.routing.build import build_router
from hybrid_gateway.routing.cascade import (
    STATIC_RULE,
    TEACHER_KEY,
    RouterCascade,
    fingerprint,
    follow,
    logits_of,
    teacher_of,
)
from hybrid_gateway.routing.classifier import ClassifierModel, load_model
from hybrid_gateway.routing.heads import LinearHead
from hybrid_gateway.routing.router import GatewayRouter, LiveModel, VersionedModel
from hybrid_gateway.routing.training import TrainingSet
from hybrid_gateway.tools.router_distil import as_model, fit_student, held_out
from hybrid_gateway.types import RequestRecord, RouteDecision
from tests.routing.fakes import WordHashEmbedder, with_embedding
from tests.routing.helpers import synthetic_rows, trained_model
from tests.test_config import minimal

HARD = "prove the theorem about prime ideals in ring number 99 rigorously"
EASY = "how do i install the client on laptop number 99"


class StaticFake(WordHashEmbedder):
    """The static embedder's seat: the same vectors under another namespace; can go down."""

    down = False

    def __init__(self) -> None:
        super().__init__("static")

    async def embed_one(self, text: str) -> Vector:
        if self.down:
            raise RuntimeError("static embedder queue full")
        return await super().embed_one(text)


def distil_model(
    teacher: ClassifierModel, e5: WordHashEmbedder, static: WordHashEmbedder,
    teacher_print: str | None = None,
) -> ClassifierModel:  # fmt: skip
    rows = synthetic_rows()
    texts = [r.prompt for r in rows]
    z = logits_of(teacher, TrainingSet.build(rows, e5.embed(texts)))
    student = fit_student(TrainingSet.build(rows, static.embed(texts)), z, l2=1e-3)
    info: dict[str, object] = {TEACHER_KEY: {"fingerprint": teacher_print or fingerprint(teacher)}}
    return as_model(student, static.namespace, info)


def distil(teacher: ClassifierModel, e5: WordHashEmbedder, static: WordHashEmbedder,
           path: Path, *, teacher_print: str | None = None) -> ClassifierModel:  # fmt: skip
    model = distil_model(teacher, e5, static, teacher_print)
    model.save(path)
    return model


def cascade_router(
    tmp_path: Path, margin: float, *, live: LiveModel | None = None
) -> tuple[GatewayRouter, WordHashEmbedder, StaticFake]:
    e5, static = WordHashEmbedder(), StaticFake()
    teacher = trained_model(e5, tmp_path / "m.npz")
    distil(teacher, e5, static, tmp_path / "s.npz")
    routing = {"classifier": {"model": "m.npz", "threshold": 0.7,
                              "cascade": {"model": "s.npz", "margin": margin}}}  # fmt: skip
    router = build_router(parse_config(minimal(routing=routing)), config_path=tmp_path / "g.yaml",
                          embedder=e5, live=live, static=static)  # fmt: skip
    e5.calls = static.calls = 0
    return router, e5, static


async def decide(
    router: GatewayRouter, e5: WordHashEmbedder, text: str, embed: bool = True
) -> RouteDecision:
    body: dict[str, Any] = {"model": "auto", "messages": [{"role": "user", "content": text}]}
    record = with_embedding(RequestRecord("r", 0.0), e5, text)
    return await router.route(parse_chat_request(body), record, embed=embed)


def test_the_student_reproduces_its_teachers_logit(tmp_path: Path) -> None:
    e5, static = WordHashEmbedder(), StaticFake()
    teacher = trained_model(e5)
    student = distil(teacher, e5, static, tmp_path / "s.npz")
    rows = synthetic_rows()
    vectors = static.embed([r.prompt for r in rows])
    feats = TrainingSet.build(rows, vectors).feats
    p_student = student.p_complex_many(vectors, feats, [r.prompt for r in rows])
    p_teacher = teacher.p_complex_many(vectors, feats, [r.prompt for r in rows])
    assert np.allclose(p_student, p_teacher, atol=0.02)
    assert teacher_of(load_model(tmp_path / "s.npz", static.namespace)) == fingerprint(teacher)


def test_a_fingerprint_changes_with_any_weight() -> None:
    teacher = trained_model(WordHashEmbedder())
    assert fingerprint(teacher) == fingerprint(replace(teacher))
    moved = replace(teacher, feature_mean=teacher.feature_mean + np.float32(1e-3))
    assert fingerprint(moved) != fingerprint(teacher)


def test_the_margin_is_in_logits_around_the_thresholds() -> None:
    cascade = RouterCascade(trained_model(WordHashEmbedder()), StaticFake(), 1.0)
    assert cascade.decides(0.9, 0.5) and cascade.decides(0.1, 0.5)  # logit +-2.2
    assert not cascade.decides(0.6, 0.5) and not cascade.decides(0.4, 0.5)  # +-0.4
    assert RouterCascade(cascade.student, StaticFake(), 0.0).decides(0.5, 0.5)


async def test_clear_questions_never_wait_for_e5(tmp_path: Path) -> None:
    router, e5, static = cascade_router(tmp_path, margin=0.5)
    hard, easy = await decide(router, e5, HARD), await decide(router, e5, EASY)
    assert (hard.lane, hard.rule, easy.lane, easy.rule) == ("heavy", STATIC_RULE,
                                                             "light", STATIC_RULE)  # fmt: skip
    assert hard.score is not None and hard.score > 0.7 and hard.threshold == 0.7
    assert hard.header().endswith(f"rule={STATIC_RULE}; score={hard.score:.3f}; threshold=0.700")
    assert (e5.calls, static.calls) == (0, 2)


async def test_near_the_threshold_e5s_classifier_decides(tmp_path: Path) -> None:
    router, e5, static = cascade_router(tmp_path, margin=20.0)  # nothing clears 20 logits
    hard = await decide(router, e5, HARD)
    assert (hard.lane, hard.rule) == ("heavy", "classifier")
    assert (e5.calls, static.calls) == (1, 1)


async def test_a_live_version_without_a_student_is_e5s_alone(tmp_path: Path) -> None:
    live = LiveModel()
    router, e5, static = cascade_router(tmp_path, margin=0.5, live=live)
    live.current = VersionedModel(trained_model(WordHashEmbedder()), 3)
    decision = await decide(router, e5, HARD)
    assert decision.rule == "classifier@v3"
    assert (e5.calls, static.calls) == (1, 0)


async def test_a_live_version_with_its_student_decides_clear_cases(tmp_path: Path) -> None:
    live = LiveModel()
    router, e5, _ = cascade_router(tmp_path, margin=0.5, live=live)
    teacher = trained_model(WordHashEmbedder())
    student = distil(teacher, WordHashEmbedder(), StaticFake(), tmp_path / "v3.npz")
    live.current = VersionedModel(teacher, 3, student)
    decision = await decide(router, e5, HARD)
    assert (decision.lane, decision.rule) == ("heavy", "classifier@v3:static")
    assert e5.calls == 0


def test_following_moves_a_student_towards_new_logits() -> None:
    e5, static = WordHashEmbedder(), StaticFake()
    teacher = trained_model(e5)
    student = distil_model(teacher, e5, static)
    rows = synthetic_rows()
    data = TrainingSet.build(rows, static.embed([r.prompt for r in rows]))
    target = logits_of(teacher, data) + 1.5  # a retrained model: every logit up by 1.5
    head = teacher.head
    assert isinstance(head, LinearHead)
    retrained = replace(teacher, head=replace(head, bias=head.bias + 1.5))  # ``target``'s
    moved = follow(student, data, target, l2=1.0, teacher=retrained)
    before = np.abs(logits_of(student, data) - target).mean()
    after = np.abs(logits_of(moved, data) - target).mean()
    assert after < 0.2 * before and moved.info["followed_rows"] == len(rows)
    assert moved.namespace == student.namespace
    assert teacher_of(moved) == fingerprint(retrained) != teacher_of(student)


async def test_a_static_outage_costs_an_e5_call_not_the_request(tmp_path: Path) -> None:
    router, e5, static = cascade_router(tmp_path, margin=0.5)
    static.down = True
    decision = await decide(router, e5, HARD)
    assert (decision.lane, decision.rule) == ("heavy", "classifier")


async def test_an_estimate_without_vectors_stays_at_the_default(tmp_path: Path) -> None:
    router, e5, static = cascade_router(tmp_path, margin=0.5)
    assert (await decide(router, e5, HARD, embed=False)).rule == "default"
    assert (e5.calls, static.calls) == (0, 0)


def _config(tmp_path: Path, student: str) -> Any:
    routing = {"classifier": {"model": "m.npz", "cascade": {"model": student}}}
    return parse_config(minimal(routing=routing))


def test_a_student_of_another_teacher_is_refused(tmp_path: Path) -> None:
    e5, static = WordHashEmbedder(), StaticFake()
    teacher = trained_model(e5, tmp_path / "m.npz")
    distil(teacher, e5, static, tmp_path / "s.npz", teacher_print="0" * 24)
    with pytest.raises(ConfigError) as info:
        build_router(_config(tmp_path, "s.npz"), config_path=tmp_path / "g.yaml", embedder=e5,
                     static=static)  # fmt: skip
    assert info.value.field == "routing.classifier.cascade.model"
    assert "router distil" in str(info.value)


def test_a_student_of_another_embedder_is_refused(tmp_path: Path) -> None:
    e5 = WordHashEmbedder()
    teacher = trained_model(e5, tmp_path / "m.npz")
    distil(teacher, e5, WordHashEmbedder("other"), tmp_path / "s.npz")
    with pytest.raises(ConfigError) as info:
        build_router(_config(tmp_path, "s.npz"), config_path=tmp_path / "g.yaml", embedder=e5,
                     static=StaticFake())  # fmt: skip
    assert info.value.field == "routing.classifier.cascade.model"


def test_without_a_static_embedder_the_classifier_decides_alone(tmp_path: Path) -> None:
    e5 = WordHashEmbedder()
    trained_model(e5, tmp_path / "m.npz")  # no student file at all: never read
    router = build_router(_config(tmp_path, "missing.npz"), config_path=tmp_path / "g.yaml",
                          embedder=e5)  # fmt: skip
    assert isinstance(router, GatewayRouter)


def test_held_out_figures_per_margin() -> None:
    e5 = WordHashEmbedder()
    teacher = trained_model(e5)
    rows = synthetic_rows()
    data = TrainingSet.build(rows, e5.embed([r.prompt for r in rows]))
    report = held_out(data, logits_of(teacher, data), 0.5, None, 1.0)
    margins = report["margins"]
    assert isinstance(margins, dict) and len(margins) == 5
    shares = [m["e5_share"] for m in margins.values()]
    assert shares == sorted(shares) and shares[0] >= 0.0 and shares[-1] <= 0.6
    assert all(0.0 <= m["agreement"] <= 1.0 for m in margins.values())


def test_the_shipped_student_is_distilled_from_the_shipped_classifier() -> None:
    from hybrid_gateway.embedding.bundled import MODEL_ID, bundled_version
    from hybrid_gateway.embedding.static import StaticE5Embedder
    from hybrid_gateway.routing.build import DEFAULT_STUDENT_FILE, default_model_path

    teacher = load_model(default_model_path(), f"{MODEL_ID}@{bundled_version()}")
    static = StaticE5Embedder()
    student = load_model(default_model_path(DEFAULT_STUDENT_FILE), f"{MODEL_ID}@{static.version}")
    assert teacher_of(student) == fingerprint(teacher)
    assert isinstance(student.info["rows"], int) and student.info["rows"] > 9000
