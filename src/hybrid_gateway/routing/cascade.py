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
``learning.router_update`` has made a retrained version live, the student (distilled from the
file's model) no longer matches it: every question then goes to e5's classifier (rule
``classifier@vN``) until a student is distilled again.  When the static vector cannot be had
(its embedder's queue full, an error), e5's classifier decides too: a warning in the log.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from hybrid_gateway.embedding.base import AsyncEmbedder
from hybrid_gateway.routing.classifier import ClassifierModel
from hybrid_gateway.routing.heads import LinearHead

STATIC_RULE = "classifier:static"
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
    teacher: str  # the fingerprint of the classifier it was distilled from

    def decides(self, p_static: float, threshold: float) -> bool:
        return abs(logit(p_static) - logit(threshold)) >= self.margin
