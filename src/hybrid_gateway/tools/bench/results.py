"""One line per request the load generator sent: what the bench scores.

The load generator writes these as JSONL (``RequestResult.to_json``); the bench reads them back
and joins them with the workload's labels by ``item``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import orjson


@dataclass(frozen=True, slots=True)
class RequestResult:
    item: str  # workload item id
    start_s: float  # when it was sent, seconds since the stage started
    latency_ms: float  # to the last byte
    ttft_ms: float | None  # streams: to the first content chunk
    status: int  # HTTP status; 0 when no response came (connection error, client timeout)
    error_code: str | None  # the gateway's error code (or "client_timeout", "connection_error")
    stream: bool
    lane: str | None  # from x-gateway-route
    channel: str | None
    rule: str | None
    cache: str | None  # x-gateway-cache
    cost_usd: float | None  # x-gateway-cost-usd, or the stream's closing comment
    mark_group: str | None  # the answer's mark: which question it was produced for
    mark_ok: bool | None  # and whether it is a good answer to it
    fallback: str | None = None  # x-gateway-fallback: timeout, failover, breaker, shed, ...
    request_id: str | None = None  # x-request-id: joins a deadline fallback to its late row

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes | str) -> RequestResult:
        return cls(**orjson.loads(raw))
