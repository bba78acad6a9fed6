"""Request-log rows and configs for the misroute review's tests."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from hybrid_gateway.embedding.base import Matrix
from hybrid_gateway.feedback import FeedbackInput, Rating, Reason
from hybrid_gateway.observability.journaled_log import RequestLog
from hybrid_gateway.observability.log_rows import note_category
from hybrid_gateway.observability.request_log import SqliteRequestLog
from hybrid_gateway.review.reader import LoggedRequest
from hybrid_gateway.types import RequestRecord, RouteDecision, Usage
from tests.routing.fakes import WordHashEmbedder

LIGHT_RULE: dict[str, Any] = {
    "name": "how-to-light", "when": {"keywords_any": ["how do i", "怎么"]}, "lane": "light",
}  # fmt: skip


def logged(
    prompt: str | None, *, ts: float = 1000.0, lane: str = "light", rule: str = "how-to-light",
    rid: str | None = None, **extra: Any,
) -> LoggedRequest:  # fmt: skip
    base = LoggedRequest(
        request_id=rid or f"r{ts:.1f}", ts=ts, tenant="t1", model="auto", lane=lane,
        channel=f"{lane}-ch", rule=rule, score=None, cache="miss", status=200, latency_ms=500.0,
        prompt_tokens=100, completion_tokens=50, cost_usd=0.0, prompt=prompt,
    )  # fmt: skip
    return replace(base, **extra)


def config_data(log: Path, prompts: str = "full", **routing: Any) -> dict[str, Any]:
    return {
        "server": {"request_log": {"path": str(log), "prompts": prompts}},
        "channels": {
            "light-ch": {"base_url": "http://127.0.0.1:1/v1", "model": "l",
                         "price_per_1m_input": 1.0, "price_per_1m_output": 2.0},
            "heavy-ch": {"base_url": "http://127.0.0.1:1/v1", "model": "h",
                         "price_per_1m_input": 10.0, "price_per_1m_output": 20.0},
        },
        "lanes": {"light": {"channel": "light-ch"}, "heavy": {"channel": "heavy-ch"}},
        "models": [{"id": "auto"}],
        "routing": {"default_lane": "heavy", "rules": [LIGHT_RULE], **routing},
    }  # fmt: skip


def write_yaml(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def write_log(
    path: Path, rows: Sequence[LoggedRequest], downs: Sequence[tuple[str, Reason | None]] = ()
) -> None:
    """Rows written by the gateway's own request log, feedback by its own store."""
    fill_log(SqliteRequestLog(path, flush_interval_s=60, prompts="full"), rows, downs)


def fill_log(
    log: RequestLog, rows: Sequence[LoggedRequest], downs: Sequence[tuple[str, Reason | None]]
) -> None:
    """``rows`` through ``log`` (SQLite or PostgreSQL), ``downs`` through its feedback store."""
    for r in rows:
        record = RequestRecord(r.request_id, r.ts, model=r.model, tenant=r.tenant,
                               latency_ms=r.latency_ms, status=r.status)  # fmt: skip
        if r.lane is not None and r.rule is not None:
            record.route = RouteDecision(r.lane, r.channel or "", r.rule, r.score)
        record.usage = Usage(r.prompt_tokens, r.completion_tokens)
        if r.prompt is not None:
            record.extra["prompt"] = r.prompt
        note_category({"category": r.category}, "category", record)
        log.write(record)
    log.flush()
    store = log.open_feedback()

    async def rate() -> None:
        for rid, reason in downs:
            await store.save("t1", FeedbackInput(rid, Rating.DOWN, reason), 2000.0)
        await store.aclose()

    asyncio.run(rate())
    log.close()


class WordVectors(WordHashEmbedder):
    """The word-hash embedder with the batch method the review uses."""

    async def embed_many(self, texts: Sequence[str]) -> Matrix:
        return self.embed(texts)

    async def aclose(self) -> None:
        return None
