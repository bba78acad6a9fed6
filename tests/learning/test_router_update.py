"""learning.router_update on a manual clock: a better candidate is versioned and swapped in, a
worse one refused, a rollback followed by every replica, an unloadable version refused (the
cascade students stored with the versions: test_router_students.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hybrid_gateway.accounting.report import sqlite_source
from hybrid_gateway.cli import main
from hybrid_gateway.config import load_config
from hybrid_gateway.embedding.base import Matrix
from hybrid_gateway.embedding.factory import SharedEmbedder, build_embedder
from hybrid_gateway.embedding.lazy import LazyEmbedding, attach_embedding
from hybrid_gateway.embedding.settings import EmbeddingConfig
from hybrid_gateway.learning.labels import Label, read_labels
from hybrid_gateway.learning.metrics import RouterUpdateMetrics
from hybrid_gateway.learning.model_store import SqliteModelStore
from hybrid_gateway.learning.router_update import RouterUpdater, UpdateParts, model_bytes
from hybrid_gateway.learning.settings import RouterUpdateConfig
from hybrid_gateway.observability.prom import Registry
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.routing.build import build_router, default_model_path
from hybrid_gateway.routing.classifier import ClassifierModel, load_model
from hybrid_gateway.routing.dataset import bundled_embedder
from hybrid_gateway.routing.heads import LinearHead
from hybrid_gateway.routing.router import LiveModel
from hybrid_gateway.routing.training import TrainingSet
from hybrid_gateway.types import ChatRequest, RequestRecord
from tests.learning.audit_logs import COMPLEX, write_config, write_router_audits

NOW = time.time()
SETTINGS = RouterUpdateConfig(enabled=True, min_labels=40, interval_s=600, poll_s=30)


@pytest.fixture(scope="module")
def embedder():  # type: ignore[no-untyped-def]
    return bundled_embedder()


@pytest.fixture(scope="module")
def shipped() -> ClassifierModel:
    return load_model(default_model_path(), None)


def parts(
    log: Path, live: LiveModel, shipped: ClassifierModel, embedder: object, clock: ManualClock,
    **changes: object,
) -> UpdateParts:  # fmt: skip
    def labels(since: float, until: float) -> list[Label]:
        with sqlite_source(log) as source:
            return read_labels(source, since, until)

    async def embed(texts: Sequence[str]) -> Matrix:
        return embedder.embed(list(texts))  # type: ignore[attr-defined,no-any-return]

    made = UpdateParts(
        settings=SETTINGS, live=live, file_model=shipped, namespace=shipped.namespace,
        store=SqliteModelStore(log), labels=labels, embed=embed, threshold=0.5, light_cost=0.1,
        clock=clock, wall=lambda: NOW, metrics=RouterUpdateMetrics(Registry()),
    )  # fmt: skip
    return replace(made, **changes)  # type: ignore[arg-type]


def everything_light(data: TrainingSet, prior: ClassifierModel, l2: float) -> ClassifierModel:
    """A deliberately bad candidate: cheaper, but never sends anything heavy."""
    head = prior.head
    assert isinstance(head, LinearHead)
    return replace(prior, head=LinearHead(head.embed_weights, head.feature_weights, -50.0))


async def test_a_better_candidate_is_versioned_and_swapped_in(
    tmp_path: Path, shipped: ClassifierModel, embedder: object,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    log = tmp_path / "requests.sqlite3"
    # every audited light answer was as good as the heavy one: the shipped model, which sends
    # most of these questions heavy at 0.5, spends for nothing
    await write_router_audits(log, NOW - 3600, 60, light_fine=True)
    live, clock = LiveModel(), ManualClock()
    updater = RouterUpdater(parts(log, live, shipped, embedder, clock))
    with caplog.at_level(logging.WARNING, "hybrid_gateway.learning"):
        assert await updater.train_once() == "accepted"
    assert "accepted as v2" in caplog.text and "cost" in caplog.text
    assert live.current is not None and live.current.version == 2 and updater.version == 2
    store = SqliteModelStore(log)
    versions = store.versions()
    assert [v.version for v in versions] == [1, 2] and store.live() == (2, shipped.namespace)
    assert versions[0].metrics == {"source": "routing.classifier.model"}
    figures = versions[1].metrics
    assert figures["cost"] < figures["live_cost"] and figures["quality"] >= figures["live_quality"]
    assert store.model(1) == model_bytes(shipped)
    # the router names the version where the classifier decided
    config = load_config(write_config(tmp_path))
    shared = bundled_async()
    router = build_router(config, config_path=tmp_path / "gateway.yaml", embedder=shared,
                          live=live)  # fmt: skip
    text = COMPLEX[0]
    record = RequestRecord("req_1", NOW)
    attach_embedding(record, LazyEmbedding(shared, text))
    request = ChatRequest("auto", [{"role": "user", "content": text}], False, False, {})
    decision = await router.route(request, record)
    assert decision.rule == "classifier@v2" and decision.score is not None
    live.current = None  # the file's model again
    record = RequestRecord("req_2", NOW)
    attach_embedding(record, LazyEmbedding(shared, text))
    assert (await router.route(request, record)).rule == "classifier"
    await shared.aclose()
    await updater.aclose()
    store.close()


def bundled_async() -> SharedEmbedder:
    return build_embedder(EmbeddingConfig())


async def test_a_worse_candidate_is_refused_with_its_figures(
    tmp_path: Path, shipped: ClassifierModel, embedder: object,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    log = tmp_path / "requests.sqlite3"
    await write_router_audits(log, NOW - 3600, 60)  # the complex questions need heavy
    live, clock = LiveModel(), ManualClock()
    updater = RouterUpdater(parts(log, live, shipped, embedder, clock, fit=everything_light))
    with caplog.at_level(logging.WARNING, "hybrid_gateway.learning"):
        assert await updater.train_once() == "refused"
    assert "router update refused" in caplog.text and "quality" in caplog.text
    assert live.current is None and SqliteModelStore(log).versions() == []
    stricter = SETTINGS.model_copy(update={"min_labels": 100})
    few = RouterUpdater(parts(log, live, shipped, embedder, clock, settings=stricter))
    assert await few.train_once() == "too_few_labels"
    await updater.aclose()
    await few.aclose()


async def test_replicas_follow_the_live_version_and_a_rollback(
    tmp_path: Path, shipped: ClassifierModel, embedder: object,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    log = tmp_path / "requests.sqlite3"
    config = write_config(tmp_path)
    await write_router_audits(log, NOW - 3600, 60, light_fine=True)
    clock = ManualClock()
    trainer_live, follower_live = LiveModel(), LiveModel()
    trainer = RouterUpdater(parts(log, trainer_live, shipped, embedder, clock))
    follows = SETTINGS.model_copy(update={"train": False})
    follower = RouterUpdater(parts(log, follower_live, shipped, embedder, clock, settings=follows))
    trainer.start()
    follower.start()
    for _ in range(200):  # both first polls done: the tasks wait on the clock
        if clock.sleepers == 2:
            break
        await asyncio.sleep(0.01)
    assert follower.version == 0  # nothing stored yet
    await clock.advance(600)  # the trainer's interval: a candidate, accepted
    for _ in range(200):  # training runs in worker threads: let it finish
        if trainer.version:
            break
        await asyncio.sleep(0.01)
    assert trainer.version == 2
    await clock.advance(30)  # the follower's poll
    for _ in range(100):
        if follower.version:
            break
        await asyncio.sleep(0.01)
    assert follower.version == 2 and follower_live.current is not None
    assert main(["router", "versions", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "*       2" in out and shipped.namespace in out
    assert main(["router", "rollback", "--config", str(config)]) == 0
    assert "v1 is live (was v2)" in capsys.readouterr().out
    await clock.advance(30)
    for _ in range(100):
        if trainer.version == follower.version == 1:
            break
        await asyncio.sleep(0.01)
    assert trainer.version == follower.version == 1
    assert main(["router", "rollback", "--config", str(config), "--to", "2"]) == 0
    assert main(["router", "rollback", "--config", str(config), "--to", "9"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    await trainer.aclose()
    await follower.aclose()


async def test_a_version_this_replica_cannot_load_is_refused(
    tmp_path: Path, shipped: ClassifierModel, embedder: object,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    log = tmp_path / "requests.sqlite3"
    store = SqliteModelStore(log)
    store.add(NOW, shipped.namespace, {"source": "test"}, model_bytes(shipped))
    live, clock = LiveModel(), ManualClock()
    metrics = RouterUpdateMetrics(Registry())
    updater = RouterUpdater(parts(log, live, shipped, embedder, clock, metrics=metrics))
    await updater.poll()
    assert updater.version == 1
    other = replace(shipped, namespace="another-embedder@2")
    store.add(NOW + 1, other.namespace, {"source": "test"}, model_bytes(other))
    store.add(NOW + 2, shipped.namespace, {"source": "test"}, b"not a model")
    store.make_live(2, NOW + 3)
    with caplog.at_level(logging.WARNING, "hybrid_gateway.learning"):
        await updater.poll()
        await updater.poll()  # logged once
    assert updater.version == 1 and "v2 not loaded, keeping v1" in caplog.text
    assert caplog.text.count("v2 not loaded") == 1 and "another-embedder@2" in caplog.text
    store.make_live(3, NOW + 4)
    await updater.poll()
    assert updater.version == 1 and "v3 not loaded" in caplog.text
    assert metrics.updates.values[("load_refused",)] == 2
    assert np.isclose(metrics.version.values[()], 1)
    store.close()
    await updater.aclose()


def test_versions_cli_on_a_log_without_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    assert main(["router", "versions", "--config", str(config)]) == 2
    assert "no request log" in capsys.readouterr().err
    SqliteModelStore(tmp_path / "requests.sqlite3").close()
    assert main(["router", "versions", "--config", str(config)]) == 0
    assert "no router model versions" in capsys.readouterr().out
    assert main(["router", "rollback", "--config", str(config)]) == 2
    assert "no router model versions" in capsys.readouterr().err


async def test_cross_fitted_updates_accept_the_better_and_refuse_the_worse(
    tmp_path: Path, shipped: ClassifierModel, embedder: object,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """``folds: 5``: every audit replayed by the fold model that never saw it, the candidate the
    folds' mean; the same gate (quality, cost, ranking) decides."""
    crossed = SETTINGS.model_copy(update={"folds": 5})
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    await write_router_audits(good / "requests.sqlite3", NOW - 3600, 60, light_fine=True)
    await write_router_audits(bad / "requests.sqlite3", NOW - 3600, 60)
    live = LiveModel()
    better = RouterUpdater(parts(good / "requests.sqlite3", live, shipped, embedder,
                                 ManualClock(), settings=crossed))  # fmt: skip
    with caplog.at_level(logging.WARNING, "hybrid_gateway.learning"):
        assert await better.train_once() == "accepted"
    assert "on 60 audited questions, each scored by the fold model that never saw it" in (
        caplog.text)
    stored = SqliteModelStore(good / "requests.sqlite3").versions()[-1].metrics
    assert stored["replayed_on"] == 60
    worse = RouterUpdater(parts(bad / "requests.sqlite3", LiveModel(), shipped, embedder,
                                ManualClock(), settings=crossed, fit=everything_light))  # fmt: skip
    assert await worse.train_once() == "refused"
    with pytest.raises(ValueError, match="folds"):
        RouterUpdateConfig(enabled=True, folds=1)
    await better.aclose()
    await worse.aclose()
