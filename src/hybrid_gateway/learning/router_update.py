"""``learning.router_update``: the router retrained on its own audits, swapped in when better.

A background task on the gateway's clock does two things:

- **Every ``interval_s`` (``train: true``)**: reads the router audits of the last
  ``window_s`` (a verdict and the question stored), and with at least ``min_labels`` of them
  trains a candidate the way ``router train --from-log`` does (``router_fit.train_candidate``:
  the oldest ``1 - holdout_share`` fit it, pulled towards the live model; the latest replay
  it).  On the replayed audits, at the live threshold, the candidate must answer at least as
  well as the live model at no higher cost, better in one of the two (cost: a light call costs
  ``light_cost`` of a heavy one), and rank no worse (the replay's area gate).  Then it is
  stored as the next version in ``router_models`` (the first time, the config file's model is
  stored first as the version to roll back to) and put live; else the refusal is logged with
  the figures.
- **Every ``poll_s``**: reads the live version of the records store (an accepted model, a
  ``router rollback``, another replica's update) and loads it when it differs from the one in
  use.  A version trained under another embedder (namespace ``model_id@version``), or one that
  does not load, is refused: this replica keeps its model and logs why.

The model goes to the router through ``LiveModel`` (one reference, replaced whole: a request
reads it once); decisions it makes are named ``classifier@vN``.  With the classifier's static
cascade on, a version trained here carries a student moved along with it (the new model's
logits on the same audited questions, ``routing/cascade.py`` ``follow``), stored in its row:
its clear cases are ``classifier@vN:static``.  The poll loads a version's stored student with
it, when it fits (``learning/router_student.py``); a version without one that fits is decided
by e5's classifier.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from hybrid_gateway.embedding.base import Matrix
from hybrid_gateway.learning.labels import Label
from hybrid_gateway.learning.metrics import RouterUpdateMetrics
from hybrid_gateway.learning.model_store import ModelStore
from hybrid_gateway.learning.router_fit import Candidate, Fit, outcome_rows, train_candidate
from hybrid_gateway.learning.router_student import StudentParts, follow_teacher, student_for
from hybrid_gateway.learning.settings import RouterUpdateConfig
from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.routing.classifier import ClassifierModel, RouterModelError, load_model
from hybrid_gateway.routing.outcomes import OutcomeRow
from hybrid_gateway.routing.router import LiveModel, VersionedModel
from hybrid_gateway.routing.training import TrainingSet, scores_of

__all__ = ["OperatingPoint", "RouterUpdater", "UpdateParts", "model_bytes", "model_from_bytes"]

log = logging.getLogger("hybrid_gateway.learning")

_EMBED_BATCH = 64


async def _embed(embed: Callable[[Sequence[str]], Awaitable[Matrix]], texts: list[str]) -> Matrix:
    """``texts`` embedded _EMBED_BATCH at a time (the e5 and the static embedder alike)."""
    parts = [await embed(texts[i : i + _EMBED_BATCH]) for i in range(0, len(texts), _EMBED_BATCH)]
    return np.concatenate(parts).astype(np.float32)


def model_bytes(model: ClassifierModel) -> bytes:
    with tempfile.TemporaryDirectory(prefix="hybrid-gateway-") as folder:
        path = Path(folder) / "model.npz"
        model.save(path)
        return path.read_bytes()


def model_from_bytes(data: bytes, namespace: str | None) -> ClassifierModel:
    """The model, refused (``RouterModelError``) when trained under another embedder (None:
    any)."""
    with tempfile.TemporaryDirectory(prefix="hybrid-gateway-") as folder:
        path = Path(folder) / "model.npz"
        path.write_bytes(data)
        return load_model(path, namespace)


@dataclass(frozen=True, slots=True)
class OperatingPoint:
    quality: float  # share of the replayed questions answered well
    cost: float  # per question, relative to heavy-only


def operating_point(
    scores: npt.NDArray[np.float64], data: TrainingSet, threshold: float, light_cost: float
) -> OperatingPoint:
    """At ``threshold``, with ``scores`` (a model's on ``data``, each from a model that never
    saw it): the share of ``data`` answered well, and the cost relative to heavy-only."""
    heavy = scores >= threshold
    light_ok = data.weak >= data.strong  # a_worse is the only verdict the light lane fails
    heavy_ok = data.strong >= data.weak
    quality = float(np.where(heavy, heavy_ok, light_ok).mean())
    share = float(heavy.mean())
    return OperatingPoint(quality, share + (1 - share) * light_cost)


@dataclass(frozen=True, slots=True)
class UpdateParts:
    settings: RouterUpdateConfig
    live: LiveModel  # what the router reads
    file_model: ClassifierModel  # routing.classifier.model: version 0
    namespace: str  # this replica's embedder
    store: ModelStore  # router_models (blocking calls: run in a worker thread)
    # audits with a wall time in [since, until) (blocking)
    labels: Callable[[float, float], list[Label]]
    embed: Callable[[Sequence[str]], Awaitable[Matrix]]
    threshold: float  # routing.classifier.threshold
    light_cost: float  # a light call's price relative to a heavy one
    clock: Clock
    wall: Callable[[], float]
    metrics: RouterUpdateMetrics | None = None
    fit: Fit | None = None  # None: fit_with_prior (a test passes a deliberately bad one)
    # routing.classifier.cascade: each version's student, trained with it here or loaded
    # with it from the store (None: the cascade is off)
    students: StudentParts | None = None


class RouterUpdater:
    def __init__(self, parts: UpdateParts) -> None:
        self._p = parts
        self._refused: set[int] = set()  # versions this replica cannot load (logged once)
        self._task: asyncio.Task[None] | None = None

    @property
    def version(self) -> int:
        current = self._p.live.current
        return 0 if current is None else current.version

    def _model(self) -> ClassifierModel:
        current = self._p.live.current
        return self._p.file_model if current is None else current.model

    def _use(
        self, model: ClassifierModel, version: int, student: ClassifierModel | None = None
    ) -> None:
        self._p.live.current = VersionedModel(model, version, student)  # one assignment: swap
        if self._p.metrics is not None:
            self._p.metrics.version.set(version)

    # -- following the records store's live version ---------------------------------------
    async def poll(self) -> None:
        found = await asyncio.to_thread(self._p.store.live)
        if found is None or found[0] == self.version or found[0] in self._refused:
            return
        version, namespace = found
        try:
            if namespace != self._p.namespace:
                raise RouterModelError(f"trained with embedder {namespace!r}, this replica "
                                       f"embeds with {self._p.namespace!r}")  # fmt: skip
            data = await asyncio.to_thread(self._p.store.model, version)
            if data is None:
                raise RouterModelError("its row is gone")
            model = await asyncio.to_thread(model_from_bytes, data, self._p.namespace)
        except RouterModelError as exc:
            self._refused.add(version)
            self._count("load_refused")
            log.warning("router model v%d not loaded, keeping v%d: %s", version, self.version, exc)
            return
        student = await asyncio.to_thread(self._stored_student, version, model)
        log.warning("router model v%d live (was v%d)%s", version, self.version,
                    "" if student is None else ", with its static student")  # fmt: skip
        self._use(model, version, student)
        self._count("loaded")

    def _stored_student(self, version: int, model: ClassifierModel) -> ClassifierModel | None:
        students = self._p.students
        if students is None:
            return None
        data = self._p.store.student(version)
        return student_for(version, model, data, students.namespace,
                           lambda raw: model_from_bytes(raw, None))  # fmt: skip

    # -- training a candidate ----------------------------------------------------------------
    async def train_once(self) -> str:
        """One attempt; what it ended in (``accepted``, ``refused``, ``too_few_labels``)."""
        settings = self._p.settings
        now = self._p.wall()
        labels = await asyncio.to_thread(self._p.labels, now - settings.window_s, now + 1)
        rows = outcome_rows(labels)
        if len(rows) < settings.min_labels:
            self._count("too_few_labels")
            log.info("router update: %d usable router audits, %d needed", len(rows),
                     settings.min_labels)  # fmt: skip
            return "too_few_labels"
        vectors = await _embed(self._p.embed, [r.prompt for r in rows])
        data = TrainingSet.build(rows, vectors)
        live, version = self._model(), self.version
        fit = self._p.fit
        candidate = await asyncio.to_thread(
            lambda: train_candidate(data, live, holdout=settings.holdout_share,
                                    l2=settings.prior_l2, fit=fit, folds=settings.folds)
        )  # fmt: skip
        held_out, threshold, light_cost = candidate.held_out, self._p.threshold, self._p.light_cost
        old = operating_point(scores_of(live, held_out), held_out, threshold, light_cost)
        new = operating_point(candidate.held_out_scores, held_out, threshold, light_cost)
        figures = (f"on {candidate.replay.unseen}: quality "
                   f"{new.quality:.4f} (live v{version} {old.quality:.4f}), cost {new.cost:.4f} "
                   f"of heavy-only (live {old.cost:.4f}), ranking area "
                   f"{candidate.replay.candidate_area:.4f} (live "
                   f"{candidate.replay.live_area:.4f})")  # fmt: skip
        better = new.quality > old.quality or new.cost < old.cost
        if not (candidate.replay.accepted and new.quality >= old.quality
                and new.cost <= old.cost and better):  # fmt: skip
            self._count("refused")
            log.warning("router update refused: %s", figures)
            return "refused"
        if self.version != version:  # a rollback or another replica's model came in meanwhile
            self._count("refused")
            log.warning("router update dropped: v%d went live while it trained", self.version)
            return "refused"
        student = await self._student(rows, data, candidate.model)
        stored = await asyncio.to_thread(self._store, candidate, student, (old, new), now)
        self._use(candidate.model, stored, student)
        self._count("accepted")
        log.warning("router update accepted as v%d: %s", stored, figures)
        return "accepted"

    def _store(
        self,
        candidate: Candidate,
        student: ClassifierModel | None,
        points: tuple[OperatingPoint, OperatingPoint],  # the live model's, the candidate's
        now: float,
    ) -> int:
        store, (old, new) = self._p.store, points
        if store.live() is None:  # the first one: the file's model becomes a version to go back to
            students = self._p.students
            store.add(now, self._p.namespace, {"source": "routing.classifier.model"},
                      model_bytes(self._p.file_model),
                      None if students is None else model_bytes(students.file_student))  # fmt: skip
        metrics = {"source": "learning.router_update", "trained_on": candidate.trained,
                   "replayed_on": candidate.replay.labels, "quality": new.quality,
                   "cost": new.cost, "live_quality": old.quality, "live_cost": old.cost,
                   "area": candidate.replay.candidate_area,
                   "live_area": candidate.replay.live_area, "prior_version": self.version,
                   "threshold": self._p.threshold}  # fmt: skip
        return store.add(now, self._p.namespace, metrics, model_bytes(candidate.model),
                         None if student is None else model_bytes(student))  # fmt: skip

    async def _student(
        self, rows: list[OutcomeRow], e5: TrainingSet, model: ClassifierModel
    ) -> ClassifierModel | None:
        """The live student moved to ``model``'s logits on the audited questions (None: no
        cascade, or the live version has no student that fits this replica)."""
        students, current = self._p.students, self._p.live.current
        if students is None:
            return None
        base = students.file_student if current is None else current.student
        if base is None:
            return None
        static = TrainingSet.build(rows, await _embed(students.embed, [r.prompt for r in rows]))
        return await asyncio.to_thread(follow_teacher, base, model, e5, static)

    def _count(self, outcome: str) -> None:
        if self._p.metrics is not None:
            self._p.metrics.outcome(outcome)

    # -- the background task ---------------------------------------------------------------
    async def run(self) -> None:
        settings, clock = self._p.settings, self._p.clock
        next_train = clock.now() + settings.interval_s
        while True:
            await self._guarded(self.poll, "poll")
            if settings.train and clock.now() >= next_train:
                next_train = clock.now() + settings.interval_s
                await self._guarded(self.train_once, "training")
            wait = settings.poll_s
            if settings.train:
                wait = min(wait, max(next_train - clock.now(), 0.0))
            await clock.sleep(wait)

    async def _guarded(self, step: Callable[[], Awaitable[object]], what: str) -> None:
        try:
            await step()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the store or the embedder is down: try again next time
            self._count("failed")
            log.warning("router update %s failed: %r", what, exc)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await asyncio.to_thread(self._p.store.close)
