"""The classifier cascade's student for each router model version (``learning.router_update``).

With ``routing.classifier.cascade`` on, a version carries a *student* (``routing/cascade.py``):
the replica that trains the version moves the live student towards the new classifier
(``follow``) and stores it in the version's row beside the classifier.  A replica that loads
the version (another replica's, a rollback, after a restart) loads the student too, if it still
fits: trained under this replica's static embedder (``model_id@version``) and distilled from
this very classifier (its teacher's fingerprint).  A student that does not fit is not used,
with a warning saying why; the version then routes as one stored without a student: e5's
classifier decides each of its questions (rule ``classifier@vN``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from hybrid_gateway.embedding.base import Matrix
from hybrid_gateway.routing.cascade import fingerprint, follow, logits_of, teacher_of
from hybrid_gateway.routing.classifier import ClassifierModel, RouterModelError
from hybrid_gateway.routing.training import TrainingSet

__all__ = ["StudentParts", "follow_teacher", "student_for"]

log = logging.getLogger("hybrid_gateway.learning")

# the student's change per retrain: strong ridge, since a few hundred audited questions say
# little about 394 weights (routing/cascade.py ``follow``)
_STUDENT_L2 = 10.0


@dataclass(frozen=True, slots=True)
class StudentParts:
    """What a replica with the classifier's cascade on needs for its versions' students."""

    file_student: ClassifierModel  # the config file model's (routing.classifier.cascade.model)
    namespace: str  # the static embedder's (model_id@version)
    embed: Callable[[Sequence[str]], Awaitable[Matrix]]  # the static embedder's


def follow_teacher(
    base: ClassifierModel, teacher: ClassifierModel, e5: TrainingSet, static: TrainingSet
) -> ClassifierModel:
    """``base`` moved to ``teacher``'s logits on the audited questions (``e5``: their e5
    vectors; ``static``: the same rows' static ones), naming ``teacher`` as its teacher."""
    return follow(base, static, logits_of(teacher, e5), _STUDENT_L2, teacher=teacher)


def student_for(
    version: int,
    teacher: ClassifierModel,
    data: bytes | None,
    namespace: str,
    read: Callable[[bytes], ClassifierModel],
) -> ClassifierModel | None:
    """The student stored with ``version`` (``data``; None: none stored), when it fits
    ``teacher`` and the static embedder ``namespace``; else None, with a warning (blocking:
    ``read`` parses the bytes, ``RouterModelError`` when they are not a model)."""
    if data is None:
        return None
    try:
        return _fitting(read(data), teacher, version, namespace)
    except RouterModelError as exc:
        log.warning("router model v%d: its static student is not used (e5's classifier decides "
                    "each question): %s", version, exc)  # fmt: skip
        return None


def _fitting(
    student: ClassifierModel, teacher: ClassifierModel, version: int, namespace: str
) -> ClassifierModel:
    if student.namespace != namespace:
        raise RouterModelError(f"trained under static embedder {student.namespace!r}, this "
                               f"replica's is {namespace!r}")  # fmt: skip
    expected = fingerprint(teacher)
    if teacher_of(student) != expected:
        raise RouterModelError(f"distilled from classifier {teacher_of(student)!r}, not from "
                               f"v{version}'s {expected!r}")  # fmt: skip
    return student
