"""A request-log row: its columns, their SQL types, and how a record becomes one.

Both request-log stores (SQLite, PostgreSQL) insert exactly these values in this order, so a
row reads back the same from either.  ``COLUMNS`` only grows: journals and log files written
by an older version lack the new columns, which read as NULL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from hybrid_gateway.observability.prompts import PROMPT_KEY
from hybrid_gateway.types import RequestRecord

__all__ = [
    "CATEGORY_CHARS", "CATEGORY_KEY", "COLUMNS", "COLUMN_TYPES", "Row",
    "note_category", "read_rows", "record_row",
]  # fmt: skip

Row = tuple[Any, ...]

# Name -> PostgreSQL type (SQLite keeps the columns untyped, as it always has).
COLUMN_TYPES: dict[str, str] = {
    "request_id": "TEXT PRIMARY KEY", "ts": "DOUBLE PRECISION", "tenant": "TEXT",
    "model": "TEXT", "stream": "INTEGER", "lane": "TEXT", "channel": "TEXT", "rule": "TEXT",
    "score": "DOUBLE PRECISION", "cache": "TEXT", "similarity": "DOUBLE PRECISION",
    "status": "INTEGER", "error_code": "TEXT", "prompt_tokens": "INTEGER",
    "completion_tokens": "INTEGER", "usage_estimated": "INTEGER", "cost_usd": "DOUBLE PRECISION",
    "latency_ms": "DOUBLE PRECISION", "upstream_ms": "DOUBLE PRECISION",
    "ttft_ms": "DOUBLE PRECISION", "retries": "INTEGER", "fallback": "TEXT", "cache_key": "TEXT",
    "app": "TEXT", "saved_usd": "DOUBLE PRECISION", "queue_ms": "DOUBLE PRECISION",
    "prompt": "TEXT", "category": "TEXT", "cache_checks": "TEXT", "cache_entry": "BIGINT",
    "upstream_model": "TEXT", "endpoint": "TEXT", "endpoint_reason": "TEXT",
}  # fmt: skip
COLUMNS: tuple[str, ...] = tuple(COLUMN_TYPES)


def record_row(record: RequestRecord) -> Row:
    """The record's values in ``COLUMNS`` order."""
    route = record.route
    usage = record.usage
    return (
        record.request_id,
        record.started_at,
        record.tenant,
        record.model,
        int(record.stream),
        route.lane if route else None,
        route.channel if route else None,
        route.rule if route else None,
        route.score if route else None,
        record.cache.value,
        record.similarity,
        record.status,
        record.error_code,
        usage.prompt_tokens if usage else None,
        usage.completion_tokens if usage else None,
        int(usage.estimated) if usage else None,
        record.cost_usd,
        round(record.latency_ms, 3),
        record.upstream_ms,
        record.ttft_ms,
        record.retries,
        record.fallback,
        record.cache_key,
        record.app,
        _saved_usd(record),
        _queue_ms(record),
        _prompt(record),
        _category(record),
        _cache_checks(record),
        _cache_entry(record),
        _text(record, "upstream_model"),  # the name the upstream answered with
        *_endpoint(record),
    )


def _endpoint(record: RequestRecord) -> tuple[str | None, str | None]:
    """A pooled channel's endpoint that answered, and the policy's reason (upstreams/pool/)."""
    choice = record.route.answering if record.route is not None else None
    if choice is None:
        return None, None
    return choice.endpoint, f"{choice.policy}; {choice.reason}" if choice.reason else choice.policy


def _text(record: RequestRecord, key: str) -> str | None:
    value = record.extra.get(key)
    return value if isinstance(value, str) else None


CATEGORY_KEY = "category"  # the record.extra key the row builder reads
# A declared category longer than this is cut (the column is for grouping, not for free text).
CATEGORY_CHARS = 64


def note_category(metadata: object, key: str, record: RequestRecord) -> None:
    """Keep the category ``metadata[key]`` declares on ``record`` (nothing when it is absent or
    not a string: the gates ignore it then too)."""
    value = metadata.get(key) if isinstance(metadata, Mapping) else None
    if isinstance(value, str):
        record.extra[CATEGORY_KEY] = value[:CATEGORY_CHARS]


def _category(record: RequestRecord) -> str | None:
    category = record.extra.get(CATEGORY_KEY)
    return category if isinstance(category, str) else None


def _cache_checks(record: RequestRecord) -> str | None:
    """The semantic cache's verdict (``cache/semantic/stage.py``): on a lookup the checks passed
    and failed (``threshold,numbers,!negation``), or why there was none (``uncacheable``,
    ``logprobs``, ``store_down``, ``error``); None when the semantic cache did not judge."""
    checks = record.extra.get("cache_checks")
    return checks if isinstance(checks, str) else None


def _cache_entry(record: RequestRecord) -> int | None:
    """The semantic entry that answered (a hit) or that this answer was stored as (a miss)."""
    entry = record.extra.get("cache_entry")
    return entry if isinstance(entry, int) and not isinstance(entry, bool) else None


def _queue_ms(record: RequestRecord) -> float | None:
    """Time spent waiting for a lane slot (lanes with a queue, ``Dispatcher._slot``)."""
    waited = record.extra.get("queue_ms")
    return round(waited, 3) if isinstance(waited, float) else None


def _prompt(record: RequestRecord) -> str | None:
    """The prompt as ``server.request_log.prompts`` keeps it (``prompts.note_prompt``)."""
    prompt = record.extra.get(PROMPT_KEY)
    return prompt if isinstance(prompt, str) else None


def _saved_usd(record: RequestRecord) -> float | None:
    """What a cache hit would have cost upstream (``Pipeline._note_saving``); None otherwise."""
    saved = record.extra.get("saved_usd")
    return saved if isinstance(saved, float) else None


def read_rows(lines: Iterable[bytes]) -> Iterable[Row]:
    """The rows of journal lines (``orjson`` arrays), padded to ``COLUMNS``."""
    for line in lines:
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a line torn by a crash mid-write: the request was never acknowledged
        if isinstance(row, list) and 0 < len(row) <= len(COLUMNS):
            # A journal written before columns were added: those columns are NULL.
            yield tuple(row) + (None,) * (len(COLUMNS) - len(row))
