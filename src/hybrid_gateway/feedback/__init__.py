"""Thumbs up/down on answers, stored next to the request log and joined to it by request id."""

from hybrid_gateway.feedback.model import (
    MAX_COMMENT_CHARS,
    Feedback,
    FeedbackInput,
    Rating,
    Reason,
    RequestRef,
    parse_feedback,
)
from hybrid_gateway.feedback.store import FeedbackStore, SqliteFeedbackStore

__all__ = [
    "MAX_COMMENT_CHARS",
    "Feedback",
    "FeedbackInput",
    "FeedbackStore",
    "Rating",
    "Reason",
    "RequestRef",
    "SqliteFeedbackStore",
    "parse_feedback",
]
