"""The classifier's static-then-e5 cascade (``routing.classifier.cascade``, off by default).

e5's classifier needs e5's vector of the question: ~30 ms of CPU for a short question, ~1 s for
a 2,000-character prompt, for every request the rules pass on.  The cascade first scores the
question with a *student*: the same kind of linear model over the static embedder's vector
(``embedding/static.py``, tens of microseconds once its tokens are known) and the same text
features, fitted by `router distil` to reproduce the e5 classifier's logit.  Its P(complex) is
on the classifier's scale, so one threshold serves both:

    student logit z_s, threshold's logit z_t
      |z_s - z_t| >= margin   the student decides alone (rule ``classifier:static``)
      otherwise               e5's classifier decides, as without the cascade (``classifier``)

A question far from the threshold is one the two models almost always agree on; the margin sets
how many near ones e5 confirms (`router distil` prints, on held-out prompts, the share that
needs e5 and the agreement with e5 at several margins).

The student is tied to its teacher: the file records the teacher's fingerprint (a hash of its
weights) and the gateway refuses a student distilled from another classifier.  When
``learning.router_update`` trains a new version, the replica that trains it moves its student
along (``follow``: the new classifier's logits on the audited questions, fitted as a change to
the live student, which then names the new classifier as its teacher), stores it with the
version, and the version decides with it (rule ``classifier@vN:static``).  A replica that
loads the version from the records store (another replica's, a rollback, a restart) loads its
student too, unless it was trained under another static embedder or names another teacher
(``learning/router_student.py``: a warning): then, as for a version stored without one, e5's
classifier decides every question (rule ``classifier@vN``).  When the static vector cannot be
had (its embedder's queue full, an error), e5's classifier decides too: a warning in the log.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from hybrid_gateway.embedding.base import AsyncEmbedder
from hybrid_gateway.routing.classifier import ClassifierModel
from hybrid_gateway.routing.heads import LinearHead
from hybrid_gateway.routing.training import TrainingSet

F64 = npt.NDArray[np.float64]

STATIC_SUFFIX = ":static"  # classifier:static, classifier@vN:static
STATIC_RULE = "classifier" + STATIC_SUFFIX
TEACHER_KEY = "teacher"  # the student's info: the teacher's namespace and fingerprint


def logit(p: float) -> float:
    p = min(max(p, 1e-9), 1 - 1e-9)
    return math.log(p / (1 - p))


def fingerprint(model: ClassifierModel) -> str:
    """A hash of what decides a model's scores: a student names its teacher by it."""
    digest = hashlib.blake2b(model.namespace.encode(), digest_size=12)
    head = model.head
    if isinstance(head, LinearHead):
        parts = [head.embed_weights, head.feature_weights, np.array([head.bias], np.float32)]
    else:
        parts = [head.weights, head.mix, np.array([head.scale, head.shift], np.float32)]
    parts += [model.feature_mean, model.feature_std]
    if model.memory is not None:
        parts += [model.memory.vectors, model.memory.targets]
    if model.ngrams is not None:
        parts += [model.ngrams.weights, model.ngrams.idf]
    for array in parts:
        digest.update(np.ascontiguousarray(array, dtype=np.float32).tobytes())
    return digest.hexdigest()


def teacher_of(student: ClassifierModel) -> str | None:
    teacher = student.info.get(TEACHER_KEY)
    return str(teacher.get("fingerprint")) if isinstance(teacher, dict) else None


@dataclass(frozen=True, slots=True)
class RouterCascade:
    student: ClassifierModel  # over the static embedder's vectors
    embedder: AsyncEmbedder  # the static embedder (the runtime's, shared with the cache)
    margin: float  # in logits, around the threshold's

    def decides(self, p_static: float, threshold: float) -> bool:
        return abs(logit(p_static) - logit(threshold)) >= self.margin


def logits_of(model: ClassifierModel, data: TrainingSet) -> F64:
    """``model``'s logit for each row of ``data`` (vectors of ``model``'s embedder): a teacher's
    are what its student learns to give."""
    p = np.clip(model.p_complex_many(data.vectors, data.feats, data.prompts), 1e-9, 1 - 1e-9)
    return np.asarray(np.log(p / (1 - p)))


def student_design(static: TrainingSet, mean: F64, std: F64) -> F64:
    """``[static vector, standardised text features, 1]`` per row."""
    feats = (static.feats.astype(np.float64) - mean) / std
    return np.hstack([static.vectors.astype(np.float64), feats, np.ones((len(static.rows), 1))])


def ridge(x: F64, target: F64, l2: float) -> F64:
    """Least squares with ``l2`` on every weight but the last (the bias)."""
    penalty = np.full(x.shape[1], l2)
    penalty[-1] = 0.0
    return np.asarray(np.linalg.solve(x.T @ x + np.diag(penalty), x.T @ target), np.float64)


def tied(student: ClassifierModel, teacher: ClassifierModel) -> ClassifierModel:
    """``student`` naming ``teacher`` as the classifier it reproduces."""
    info = dict(student.info)
    info[TEACHER_KEY] = {"namespace": teacher.namespace, "fingerprint": fingerprint(teacher)}
    return replace(student, info=info)


def follow(
    student: ClassifierModel, static: TrainingSet, target: F64, l2: float,
    *, teacher: ClassifierModel,
) -> ClassifierModel:  # fmt: skip
    """``student`` moved towards ``target`` logits (``teacher``'s) on ``static``'s rows: a ridge
    fit of the difference, added to its weights (a retrained classifier is its predecessor plus
    a small change, learned from a few hundred audited questions: the student follows it the
    same way; ``l2`` keeps the change small where the rows say little).  The moved student names
    ``teacher`` as its teacher."""
    head = student.head
    if not isinstance(head, LinearHead):
        raise ValueError("a student is a linear model")
    mean = student.feature_mean.astype(np.float64)
    std = student.feature_std.astype(np.float64)
    x = student_design(static, mean, std)
    delta = ridge(x, target - logits_of(student, static), l2)
    d = head.dim
    moved = LinearHead((head.embed_weights + delta[:d]).astype(np.float32),
                       (head.feature_weights + delta[d:-1]).astype(np.float32),
                       float(head.bias + delta[-1]))  # fmt: skip
    info = dict(student.info, followed_rows=len(static.rows))
    followed = ClassifierModel(student.namespace, moved, student.feature_mean,
                               student.feature_std, info)  # fmt: skip
    return tied(followed, teacher)
