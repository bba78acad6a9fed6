"""``server.request_log.prompts`` and ``retention_days``: what the log keeps, and for how long."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from hybrid_gateway.observability.prompts import PromptMode, redact, stored_prompt
from hybrid_gateway.observability.request_log import EXPIRY_INTERVAL_S, SqliteRequestLog
from hybrid_gateway.types import RequestRecord

DAY = 86_400.0
QUESTION = "Mail bob.smith@example.com or call +1 (415) 555-0134 about order 123456789"
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "an earlier question"},
    {"role": "assistant", "content": "an answer"},
    {"role": "user", "content": [{"type": "text", "text": QUESTION}]},
]


def test_redact_masks_personal_data_and_ids() -> None:
    text = redact(
        f"{QUESTION}; ticket req_8f3a9c2d1e, trace 3f2a9b8c7d6e5f4a3b2c, "
        "id 123e4567-e89b-12d3-a456-426614174000, phone 020 7946 0958"
    )
    for secret in ("bob.smith", "example.com", "415", "555-0134", "123456789", "req_8f3a",
                   "3f2a9b8c", "123e4567", "7946"):  # fmt: skip
        assert secret not in text
    assert text.startswith("Mail [redacted] or call [redacted] about order [redacted]")


def test_redact_keeps_ordinary_text_and_small_numbers() -> None:
    text = "How do I install version 3.12 on 2 machines by 2025-05-01?"
    assert redact(text) == text


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("none", None),
        ("hash", hashlib.sha256(QUESTION.encode()).hexdigest()),
        ("redacted", "Mail [redacted] or call [redacted] about order [redacted]"),
        ("full", QUESTION),
    ],
)
def test_modes_keep_the_last_user_message(mode: PromptMode, expected: str | None) -> None:
    assert stored_prompt(mode, MESSAGES) == expected


def test_no_user_message_stores_nothing() -> None:
    assert stored_prompt("full", [{"role": "system", "content": "x"}]) is None


@pytest.mark.parametrize("mode", ["none", "hash", "redacted", "full"])
def test_the_prompt_column_follows_the_mode(tmp_path: Path, mode: PromptMode) -> None:
    log = SqliteRequestLog(tmp_path / "r.sqlite3", flush_interval_s=60, prompts=mode)
    try:
        record = RequestRecord("req_1", 1000.0)
        log.note_prompt(MESSAGES, record)
        log.write(record)
        log.flush()
        stored = log.query("SELECT prompt FROM requests")[0][0]
    finally:
        log.close()
    assert stored == stored_prompt(mode, MESSAGES)


class Wall:
    """A hand-moved wall clock for the retention sweep."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def ids(log: SqliteRequestLog) -> list[str]:
    return [row[0] for row in log.query("SELECT request_id FROM requests ORDER BY ts")]


def test_retention_deletes_old_rows_on_start(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    seed = SqliteRequestLog(path, flush_interval_s=60)
    for name, ts in [("old", 0.0), ("edge", 60 * DAY - 1), ("new", 69 * DAY)]:
        seed.write(RequestRecord(name, ts))
    seed.close()
    log = SqliteRequestLog(path, flush_interval_s=60, retention_days=10, wall=Wall(70 * DAY))
    try:
        assert ids(log) == ["new"]
    finally:
        log.close()


def test_retention_sweeps_at_most_once_an_interval(tmp_path: Path) -> None:
    wall = Wall(100 * DAY)
    log = SqliteRequestLog(tmp_path / "r.sqlite3", flush_interval_s=60, retention_days=1, wall=wall)
    try:
        log.write(RequestRecord("a", 99 * DAY + 10))
        log.flush()
        wall.now += 60  # "a" is now past retention ...
        log._expire_if_due()  # ... but the start-up sweep ran less than an interval ago
        assert ids(log) == ["a"]
        wall.now += EXPIRY_INTERVAL_S
        log._expire_if_due()
        assert ids(log) == []
    finally:
        log.close()


def test_without_retention_nothing_is_deleted(tmp_path: Path) -> None:
    log = SqliteRequestLog(tmp_path / "r.sqlite3", flush_interval_s=60, wall=Wall(1e10))
    try:
        log.write(RequestRecord("ancient", 0.0))
        log.flush()
        assert log.expire() == 0
        assert ids(log) == ["ancient"]
    finally:
        log.close()
