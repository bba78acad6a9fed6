"""Values that flow along the request path: frozen, typed, no behaviour beyond formatting."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A validated chat completion request, as the client sent it."""

    model: str
    messages: Sequence[Mapping[str, Any]]
    stream: bool
    include_usage: bool
    # The parsed JSON body, forwarded upstream with ``model`` replaced.
    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    # True when the upstream gave no usage and the gateway counted the tokens itself.
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_openai(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True, slots=True)
class EndpointChoice:
    """Which endpoint of a channel's pool answered, and why (upstreams/pool/)."""

    channel: str
    endpoint: str
    policy: str
    # The policy's reason, ``key=value`` pairs (``match=0.82``), or "" when it has none.
    reason: str = ""

    def header(self) -> str:
        text = f"endpoint={self.endpoint}; policy={self.policy}"
        return f"{text}; {self.reason}" if self.reason else text


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """Which lane and channel answer, and the rule (or score) that decided."""

    lane: str
    channel: str
    rule: str
    score: float | None = None
    # The classifier's threshold the score was compared with (None for other decisions).
    threshold: float | None = None
    # Moved to a cheaper lane for a while (the tenant's budget ran out): its answer is not
    # what the request would get otherwise, so the caches do not keep it.
    downgraded: bool = False
    # The endpoint of a pooled channel that answered (None: a single-endpoint channel).
    endpoint: EndpointChoice | None = None

    def header(self) -> str:
        text = f"lane={self.lane}; channel={self.channel}; rule={self.rule}"
        if self.score is not None:
            text = f"{text}; score={self.score:.3f}"
        if self.threshold is not None:
            text = f"{text}; threshold={self.threshold:.3f}"
        return text if self.answering is None else f"{text}; {self.answering.header()}"

    @property
    def answering(self) -> EndpointChoice | None:
        """The endpoint decision, if it was made on the channel that answers now (a retry on
        the backup channel leaves the primary pool's decision behind)."""
        endpoint = self.endpoint
        return endpoint if endpoint is not None and endpoint.channel == self.channel else None


class CacheOutcome(enum.StrEnum):
    MISS = "miss"
    EXACT = "exact"
    # A stored answer to a question judged the same (similarity + guards, cache/semantic/).
    SEMANTIC = "semantic"
    # The request was not eligible for the cache (e.g. the client opted out).
    BYPASS = "bypass"


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    """A complete, successful chat.completion body and what it cost to make."""

    body: bytes
    usage: Usage
    created_at: float


@dataclass(frozen=True, slots=True)
class CacheLookup:
    outcome: CacheOutcome
    key: str
    entry: CachedAnswer | None = None
    similarity: float | None = None


@dataclass(frozen=True, slots=True)
class ChatResult:
    """A finished non-streamed answer: the bytes to send and the usage that was billed."""

    body: bytes
    usage: Usage


# record.extra key: the prompt tokens admission debited from the tenant's token buckets (the
# settle trues them up against what the answer used; tenancy/admission.py).
ADMITTED_TOKENS = "admitted_tokens"


@dataclass(slots=True)
class RequestRecord:
    """Everything decided about one request; filled in along the path, logged at the end."""

    request_id: str
    started_at: float  # wall clock, for the log
    model: str = ""
    stream: bool = False
    tenant: str = "default"
    # The business app the API key was issued for (a tenant may have several).
    app: str = "default"
    cache_key: str = ""
    cache: CacheOutcome = CacheOutcome.MISS
    similarity: float | None = None
    route: RouteDecision | None = None
    status: int = 200
    error_code: str | None = None
    usage: Usage | None = None
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    upstream_ms: float | None = None
    ttft_ms: float | None = None
    retries: int = 0
    fallback: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
