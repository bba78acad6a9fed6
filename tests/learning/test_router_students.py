"""The classifier cascade's students stored with the router model versions, on both records
stores: a version trained here carries its moved student into its row; a restarted replica (or
another one) loads it with the version and routes its clear cases with it; a rollback brings
the version's own student back; a student that does not fit (another static embedder, another
teacher, unreadable) is refused with a warning and e5's classifier decides; a row without a
student (stored before students were) loads as a version without one."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from hybrid_gateway.accounting.report import sqlite_source
from hybrid_gateway.cli import main
from hybrid_gateway.config import load_config
from hybrid_gateway.embedding.base import Matrix
from hybrid_gateway.embedding.factory import build_embedder, build_static_embedder
from hybrid_gateway.embedding.lazy import LazyEmbedding, attach_embedding
from hybrid_gateway.embedding.settings import EmbeddingConfig
from hybrid_gateway.embedding.static import StaticE5Embedder
from hybrid_gateway.learning.labels import Label, read_labels
from hybrid_gateway.learning.model_store import ModelStore, SqliteModelStore
from hybrid_gateway.learning.router_student import StudentParts
from hybrid_gateway.learning.router_update import (
    RouterUpdater,
    UpdateParts,
    model_bytes,
    model_from_bytes,
)
from hybrid_gateway.learning.settings import RouterUpdateConfig
from hybrid_gateway.learning.versions_cli import rollback
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.routing.build import DEFAULT_STUDENT_FILE, build_router, default_model_path
from hybrid_gateway.routing.cascade import fingerprint, logits_of, teacher_of
from hybrid_gateway.routing.classifier import ClassifierModel, load_model
from hybrid_gateway.routing.dataset import bundled_embedder
from hybrid_gateway.routing.heads import LinearHead
from hybrid_gateway.routing.outcomes import OutcomeRow
from hybrid_gateway.routing.router import LiveModel
from hybrid_gateway.routing.training import TrainingSet
from hybrid_gateway.types import ChatRequest, RequestRecord
from tests.learning.audit_logs import COMPLEX, write_config, write_router_audits
from tests.learning.model_stores import open_model_store

NOW = time.time()
SETTINGS = RouterUpdateConfig(enabled=True, min_labels=40, interval_s=600, poll_s=30)
STUDENT_NOT_USED = "its static student is not used"


@pytest.fixture(scope="module")
def embedder():  # type: ignore[no-untyped-def]
    return bundled_embedder()


@pytest.fixture(scope="module")
def static_model() -> StaticE5Embedder:
    return StaticE5Embedder()


@pytest.fixture(scope="module")
def shipped() -> ClassifierModel:
    return load_model(default_model_path(), None)


@pytest.fixture(scope="module")
def student() -> ClassifierModel:
    return load_model(default_model_path(DEFAULT_STUDENT_FILE), None)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ModelStore]:
    """Where the versions live (the audits stay in the SQLite request log)."""
    yield from open_model_store(str(request.param), request, tmp_path)


def updater(
    log: Path, store: ModelStore, shipped: ClassifierModel, embedder: object,
    static_model: StaticE5Embedder, student: ClassifierModel | None,
) -> tuple[RouterUpdater, LiveModel]:  # fmt: skip
    """A replica's updater; ``student``: the file model's (the cascade on), None: off."""

    def labels(since: float, until: float) -> list[Label]:
        with sqlite_source(log) as source:
            return read_labels(source, since, until)

    async def embed(texts: Sequence[str]) -> Matrix:
        return embedder.embed(list(texts))  # type: ignore[attr-defined,no-any-return]

    async def embed_static(texts: Sequence[str]) -> Matrix:
        return static_model.embed(list(texts))

    students = None
    if student is not None:
        students = StudentParts(student, student.namespace, embed_static)
    live = LiveModel()
    parts = UpdateParts(
        settings=SETTINGS, live=live, file_model=shipped, namespace=shipped.namespace,
        store=store, labels=labels, embed=embed, threshold=0.5, light_cost=0.1,
        clock=ManualClock(), wall=lambda: NOW, students=students,
    )  # fmt: skip
    return RouterUpdater(parts), live


def weights(model: ClassifierModel | None) -> npt.NDArray[np.float32]:
    assert model is not None and isinstance(model.head, LinearHead)
    return model.head.embed_weights


async def test_a_version_trained_here_brings_its_student_along(
    tmp_path: Path, shipped: ClassifierModel, embedder: object, static_model: StaticE5Embedder,
    student: ClassifierModel, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The accepted version's student is the live one moved towards the new model, naming it
    as its teacher, and stored with it (the file's model, stored first, with its own);
    `router versions` says which versions have one."""
    log = tmp_path / "requests.sqlite3"
    await write_router_audits(log, NOW - 3600, 60, light_fine=True)
    store = SqliteModelStore(log)
    trainer, live = updater(log, store, shipped, embedder, static_model, student)
    assert await trainer.train_once() == "accepted"
    current = live.current
    assert current is not None and current.student is not None and current.version == 2
    followed = current.student.info["followed_rows"]
    assert isinstance(followed, int) and followed > 0
    assert teacher_of(current.student) == fingerprint(current.model) != fingerprint(shipped)
    # on the audited questions the moved student is nearer the new model than the old one was
    with sqlite_source(log) as source:
        texts = sorted({label.prompt for label in read_labels(source, 0, NOW + 1)
                        if label.prompt is not None})  # fmt: skip
    rows = [OutcomeRow(t, 1.0, 1.0, "", "audits") for t in texts]
    e5 = TrainingSet.build(rows, embedder.embed(texts))  # type: ignore[attr-defined]
    static = TrainingSet.build(rows, static_model.embed(texts))
    target = logits_of(current.model, e5)
    before = np.abs(logits_of(student, static) - target).mean()
    after = np.abs(logits_of(current.student, static) - target).mean()
    assert after < before
    # both versions' students are in their rows
    assert store.student(1) == model_bytes(student)
    assert store.student(2) == model_bytes(current.student)
    assert [v.has_student for v in store.versions()] == [True, True]
    config = str(write_config(tmp_path))
    assert main(["router", "versions", "--config", config]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "student" in lines[0] and all("  yes  " in line for line in lines[1:3])
    assert main(["router", "versions", "--config", config, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["versions"]
    assert [v["student"] for v in listed] == [True, True]
    await trainer.aclose()


async def test_a_restart_and_a_rollback_bring_the_stored_student_back(
    tmp_path: Path, store: ModelStore, shipped: ClassifierModel, embedder: object,
    static_model: StaticE5Embedder, student: ClassifierModel, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    log = tmp_path / "requests.sqlite3"
    await write_router_audits(log, NOW - 3600, 60, light_fine=True)
    trainer, trained = updater(log, store, shipped, embedder, static_model, student)
    assert await trainer.train_once() == "accepted"
    assert trained.current is not None and trained.current.student is not None
    # a restart: a new replica on the same store, the cascade on, nothing in memory
    restarted, live = updater(log, store, shipped, embedder, static_model, student)
    with caplog.at_level(logging.WARNING, "hybrid_gateway.learning"):
        await restarted.poll()
    current = live.current
    assert current is not None and current.version == 2 and current.student is not None
    assert np.array_equal(weights(current.student), weights(trained.current.student))
    assert teacher_of(current.student) == fingerprint(current.model)
    assert "v2 live (was v0), with its static student" in caplog.text
    assert STUDENT_NOT_USED not in caplog.text
    # the router decides the version's clear cases with the stored student
    path = write_config(tmp_path)  # margin 0: the student decides every question
    path.write_text(
        path.read_text().replace(
            "threshold: 0.5}", "threshold: 0.5, cascade: {model: default, margin: 0.0}}"
        )
    )
    config = load_config(path)
    e5, static = build_embedder(EmbeddingConfig()), build_static_embedder(EmbeddingConfig())
    router = build_router(config, config_path=tmp_path / "gateway.yaml", embedder=e5,
                          live=live, static=static)  # fmt: skip
    record = RequestRecord("req_1", NOW)
    attach_embedding(record, LazyEmbedding(e5, COMPLEX[0]))
    request = ChatRequest("auto", [{"role": "user", "content": COMPLEX[0]}], False, False, {})
    assert (await router.route(request, record)).rule == "classifier@v2:static"
    # a rollback: v1 comes back with the file's student, then v2 with its own
    assert rollback(store, 1) == 0
    await restarted.poll()
    assert live.current is not None and live.current.version == 1
    assert np.array_equal(weights(live.current.student), weights(student))
    assert rollback(store, 2) == 0
    await restarted.poll()
    assert live.current is not None and live.current.version == 2
    assert np.array_equal(weights(live.current.student), weights(trained.current.student))
    # a replica with the cascade off loads the version alone, and says nothing of students
    caplog.clear()
    off, off_live = updater(log, store, shipped, embedder, static_model, None)
    with caplog.at_level(logging.WARNING, "hybrid_gateway.learning"):
        await off.poll()
    assert off_live.current is not None and off_live.current.version == 2
    assert off_live.current.student is None and STUDENT_NOT_USED not in caplog.text
    await e5.aclose()
    await static.aclose()
    for opened in (trainer, restarted, off):
        await opened.aclose()


async def test_a_student_that_does_not_fit_is_refused_with_a_warning(
    tmp_path: Path, store: ModelStore, shipped: ClassifierModel, embedder: object,
    static_model: StaticE5Embedder, student: ClassifierModel, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """The version itself loads (e5's classifier decides it); its student does not."""
    replica, live = updater(tmp_path / "requests.sqlite3", store, shipped, embedder,
                            static_model, student)  # fmt: skip
    namespace = shipped.namespace
    head = shipped.head
    assert isinstance(head, LinearHead)
    retrained = replace(shipped, head=replace(head, bias=head.bias + 0.5))
    upgraded = replace(student, namespace="static-e5@999")  # another static embedder version
    cases = [
        (shipped, model_bytes(upgraded), "static-e5@999"),
        (retrained, model_bytes(student), "distilled from classifier"),  # the shipped one's
        (shipped, b"not a model", "not a readable router model"),
    ]
    with caplog.at_level(logging.WARNING, "hybrid_gateway.learning"):
        for n, (model, data, why) in enumerate(cases, start=1):
            assert store.add(NOW + n, namespace, {}, model_bytes(model), data) == n
            await replica.poll()
            assert live.current is not None and live.current.version == n, why
            assert live.current.student is None and why in caplog.text
            assert f"router model v{n}: {STUDENT_NOT_USED}" in caplog.text
        assert caplog.text.count(STUDENT_NOT_USED) == 3
        # a row without a student (as stored before students were): loads, nothing to refuse
        assert store.add(NOW + 4, namespace, {}, model_bytes(shipped)) == 4
        await replica.poll()
        assert live.current is not None and live.current.version == 4
        assert live.current.student is None and caplog.text.count(STUDENT_NOT_USED) == 3
        # one that fits: loaded with its version
        assert store.add(NOW + 5, namespace, {}, model_bytes(shipped), model_bytes(student)) == 5
        await replica.poll()
    assert live.current is not None and live.current.version == 5
    assert np.array_equal(weights(live.current.student), weights(student))
    assert caplog.text.count(STUDENT_NOT_USED) == 3
    assert model_from_bytes(model_bytes(student), None).namespace == student.namespace
    await replica.aclose()
