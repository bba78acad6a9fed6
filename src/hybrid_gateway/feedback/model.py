"""Feedback values and the parsing of ``POST /v1/feedback`` bodies.

Hand-written checks like ``api/schema.py``: each failure names the parameter (``param``) the
way the OpenAI API does, so a client developer sees which field to fix.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from hybrid_gateway.api.schema import reject_unknown
from hybrid_gateway.errors import InvalidRequest

# A comment is a hint for the weekly misroute review, not a support ticket; the bound keeps one
# client from filling the request log's disk through this endpoint.
MAX_COMMENT_CHARS = 2000
# Gateway ids are 36 characters; the bound only stops abuse, it is not a format check.
MAX_REQUEST_ID_CHARS = 128


class Rating(enum.StrEnum):
    UP = "up"
    DOWN = "down"


class Reason(enum.StrEnum):
    """Why an answer was rated down: each points the misroute review at a different fix."""

    WRONG = "wrong"  # the light lane could not answer it: route it heavy
    TOO_SLOW = "too_slow"  # the heavy lane was not needed: route it light, or cache it
    TOO_SHALLOW = "too_shallow"  # right but thin: a candidate for the heavy lane
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class FeedbackInput:
    """What the client sent, validated."""

    request_id: str
    rating: Rating
    reason: Reason | None = None
    comment: str | None = None


@dataclass(frozen=True, slots=True)
class RequestRef:
    """The logged request a feedback refers to: who made it and how it was answered."""

    request_id: str
    tenant: str
    model: str
    lane: str | None
    channel: str | None
    rule: str | None
    cache: str
    status: int


@dataclass(frozen=True, slots=True)
class Feedback:
    request_id: str
    tenant: str
    rating: Rating
    reason: Reason | None
    comment: str | None
    created_at: float  # wall clock of the first rating
    updated_at: float  # wall clock of the latest (a client may change its mind)

    def as_json(self, request: RequestRef | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "object": "feedback",
            "request_id": self.request_id,
            "rating": self.rating.value,
            "reason": self.reason.value if self.reason else None,
            "comment": self.comment,
            "created_at": int(self.created_at),
            "updated_at": int(self.updated_at),
        }
        if request is not None:
            out["request"] = {
                "model": request.model, "lane": request.lane, "channel": request.channel,
                "rule": request.rule, "cache": request.cache, "status": request.status,
            }  # fmt: skip
        return out


_FIELDS = frozenset({"request_id", "rating", "reason", "comment"})


def parse_feedback(body: Mapping[str, Any]) -> FeedbackInput:
    reject_unknown(body, _FIELDS)
    request_id = body.get("request_id")
    if not isinstance(request_id, str) or not request_id:
        _missing_or_wrong("request_id", request_id, "the x-request-id of an answer")
    if len(request_id) > MAX_REQUEST_ID_CHARS:
        _invalid("request_id", f"at most {MAX_REQUEST_ID_CHARS} characters")
    rating = _choice(body, "rating", Rating, required=True)
    if rating is None:  # unreachable with required=True; narrows the type
        _missing_or_wrong("rating", None, "'up' or 'down'")
    reason = _choice(body, "reason", Reason, required=False)
    comment = body.get("comment")
    if comment is not None:
        if not isinstance(comment, str):
            _missing_or_wrong("comment", comment, "a string")
        if len(comment) > MAX_COMMENT_CHARS:
            _invalid("comment", f"at most {MAX_COMMENT_CHARS} characters, got {len(comment)}")
    return FeedbackInput(request_id, rating, reason, comment or None)


_E = TypeVar("_E", Rating, Reason)


def _choice(body: Mapping[str, Any], param: str, kind: type[_E], *, required: bool) -> _E | None:
    value = body.get(param)
    if value is None and not required:
        return None
    allowed = ", ".join(repr(m.value) for m in kind)
    if not isinstance(value, str):
        _missing_or_wrong(param, value, f"one of {allowed}")
    try:
        return kind(value)
    except ValueError:
        _invalid(param, f"one of {allowed}, got {value!r}")


def _missing_or_wrong(param: str, value: Any, expected: str) -> NoReturn:
    if value is None:
        raise InvalidRequest(
            f"Missing required parameter: '{param}' ({expected}).",
            param=param,
            code="missing_required_parameter",
        )
    raise InvalidRequest(
        f"Invalid type for '{param}': expected {expected}, but got {type(value).__name__}.",
        param=param,
        code="invalid_type",
    )


def _invalid(param: str, expected: str) -> NoReturn:
    raise InvalidRequest(f"'{param}' must be {expected}", param=param, code="invalid_value")
