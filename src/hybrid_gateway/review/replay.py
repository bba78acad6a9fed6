"""Replay the logged traffic through the real router, under the config as is and as proposed.

Each logged request with a stored text prompt is routed again by ``GatewayRouter`` built
from the config (``routing/build.py``) as a one-message chat with the logged model and tenant,
and the logged category as its ``metadata`` (under the gates' key), so category gates apply
as they did live.  What the log does not keep cannot be replayed: earlier turns, attachments
and the rest of the metadata (so conversation-depth and document-type rules see a single-turn
text request).  Cache hits are left out: a route change would not have reached an upstream
for them.

The cost of a request on a lane is its logged tokens times the prices of the lane's channel
(``channels.<name>.price_per_1m_input/output``): the same tokens, priced where the route sends
them.  Lane shares and costs are of the replayed requests, both sides replayed, so a change
in the figures is the proposal's alone, not drift between the log and the config in force.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hybrid_gateway.config import GatewayConfig, parse_config
from hybrid_gateway.embedding.lazy import LazyEmbedding, attach_embedding
from hybrid_gateway.review.collect import CACHE_HITS, Flagged
from hybrid_gateway.review.reader import LoggedRequest
from hybrid_gateway.review.vectors import PromptVectors
from hybrid_gateway.routing.build import build_router
from hybrid_gateway.types import ChatRequest, RequestRecord


@dataclass(frozen=True, slots=True)
class Routes:
    """The lane each request routes to under one config (None: not replayed)."""

    config: GatewayConfig
    lanes: tuple[str | None, ...]


@dataclass(frozen=True, slots=True)
class Effect:
    replayed: int
    heavy_share_before: float
    heavy_share_after: float
    cost_before_usd: float
    cost_after_usd: float
    flagged_changed: int  # flagged requests now on another lane
    flagged_fixed: int  # ... on the lane their feedback asked for
    collateral: int  # unflagged requests now on another lane

    @property
    def net(self) -> int:
        return self.flagged_fixed - self.collateral

    def as_json(self) -> dict[str, float | int]:
        return {name: getattr(self, name) for name in self.__slots__} | {"net": self.net}


def replayable(request: LoggedRequest, has_text: bool) -> bool:
    return has_text and request.prompt is not None and request.cache not in CACHE_HITS


def parse_text(text: str, source: Path) -> GatewayConfig:
    return parse_config(yaml.safe_load(text), str(source))


async def route_all(
    config: GatewayConfig,
    config_path: Path,
    requests: Sequence[LoggedRequest],
    vectors: PromptVectors | None,
) -> Routes:
    """Route every replayable request (``vectors`` is None: the prompts are not text)."""
    learned = config.routing.learned
    router = build_router(config, config_path=config_path, embedder=vectors if learned else None)
    key = config.routing.category_key
    lanes: list[str | None] = []
    for r in requests:
        if not replayable(r, vectors is not None) or r.prompt is None:
            lanes.append(None)
            continue
        messages = [{"role": "user", "content": r.prompt}]
        body: dict[str, Any] = {"model": r.model, "messages": messages}
        if r.category is not None:
            body["metadata"] = {key: r.category}
        chat = ChatRequest(r.model, messages, stream=False, include_usage=False, body=body)
        record = RequestRecord(r.request_id, r.ts, model=r.model, tenant=r.tenant)
        if learned and vectors is not None:
            attach_embedding(record, LazyEmbedding(vectors, r.prompt))
        decision = await router.route(chat, record)
        lanes.append(decision.lane)
    return Routes(config, tuple(lanes))


def request_cost(request: LoggedRequest, lane: str, config: GatewayConfig) -> float:
    channel = config.channels[config.lanes[lane].channel]
    return (
        request.prompt_tokens * channel.price_per_1m_input
        + request.completion_tokens * channel.price_per_1m_output
    ) / 1e6


def effect(
    requests: Sequence[LoggedRequest],
    flagged: Sequence[Flagged],
    before: Routes,
    after: Routes,
) -> Effect:
    wanted = {f.request.request_id: f.want for f in flagged}
    routing = before.config.routing
    heavy = routing.complex_lane
    target = {"complex": routing.complex_lane, "simple": routing.simple_lane}
    replayed = heavy_before = heavy_after = changed = fixed = collateral = 0
    cost_before = cost_after = 0.0
    for r, a, b in zip(requests, before.lanes, after.lanes, strict=True):
        if a is None or b is None:
            continue
        replayed += 1
        heavy_before += a == heavy
        heavy_after += b == heavy
        cost_before += request_cost(r, a, before.config)
        cost_after += request_cost(r, b, after.config)
        if a == b:
            continue
        if r.request_id not in wanted:
            collateral += 1
            continue
        changed += 1
        want = wanted[r.request_id]
        fixed += want is not None and b == target[want]
    share = 1 / replayed if replayed else 0.0
    return Effect(replayed, heavy_before * share, heavy_after * share, cost_before, cost_after,
                  changed, fixed, collateral)  # fmt: skip
