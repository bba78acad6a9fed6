from __future__ import annotations

from typing import Any

import pytest

from hybrid_gateway.errors import InvalidRequest
from hybrid_gateway.feedback import MAX_COMMENT_CHARS, FeedbackInput, Rating, Reason, parse_feedback


def test_minimal_and_full_bodies() -> None:
    assert parse_feedback({"request_id": "req_1", "rating": "up"}) == FeedbackInput(
        "req_1", Rating.UP
    )
    full = parse_feedback(
        {"request_id": "req_1", "rating": "down", "reason": "too_shallow", "comment": "thin"}
    )
    assert full == FeedbackInput("req_1", Rating.DOWN, Reason.TOO_SHALLOW, "thin")


def test_empty_comment_is_no_comment() -> None:
    assert parse_feedback({"request_id": "r", "rating": "up", "comment": ""}).comment is None


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"rating": "up"}, "request_id", "missing_required_parameter"),
        ({"request_id": 7, "rating": "up"}, "request_id", "invalid_type"),
        ({"request_id": "r" * 129, "rating": "up"}, "request_id", "invalid_value"),
        ({"request_id": "r"}, "rating", "missing_required_parameter"),
        ({"request_id": "r", "rating": "meh"}, "rating", "invalid_value"),
        ({"request_id": "r", "rating": True}, "rating", "invalid_type"),
        ({"request_id": "r", "rating": "down", "reason": "ugly"}, "reason", "invalid_value"),
        ({"request_id": "r", "rating": "down", "comment": ["x"]}, "comment", "invalid_type"),
        (
            {"request_id": "r", "rating": "down", "comment": "x" * (MAX_COMMENT_CHARS + 1)},
            "comment",
            "invalid_value",
        ),
        ({"request_id": "r", "rating": "up", "stars": 5}, "stars", "unsupported_parameter"),
    ],
)
def test_bad_bodies_name_the_parameter(body: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_feedback(body)
    assert (info.value.param, info.value.code, info.value.status) == (param, code, 400)


def test_a_comment_at_the_bound_is_accepted() -> None:
    comment = "好" * MAX_COMMENT_CHARS
    assert parse_feedback({"request_id": "r", "rating": "up", "comment": comment}).comment
