"""The config: one YAML file parsed once, at the edge, into a strict typed tree.

Unknown keys are errors (``extra="forbid"``), cross-references (lane -> channel, rule -> lane,
model -> lane) are checked, and every failure is a ``ConfigError`` naming the file, the field
and what was expected.  Runtime objects are built from this tree in ``api/app.py``; nothing
here opens a socket or a file other than the config itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from hybrid_gateway.cache.semantic.settings import SemanticCacheConfig
from hybrid_gateway.config_checks import cross_checks
from hybrid_gateway.configbase import (
    FieldError as _FieldError,
)
from hybrid_gateway.configbase import (
    NonNegFloat,
    PositiveFloat,
    PositiveInt,
    must_exist,
)
from hybrid_gateway.configbase import (
    Strict as _Strict,
)
from hybrid_gateway.embedding.settings import EmbeddingConfig
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.learning.settings import LearningConfig, lanes_named
from hybrid_gateway.observability.prompts import PromptMode
from hybrid_gateway.resilience.settings import DeferredConfig, LaneQueueConfig, SheddingConfig
from hybrid_gateway.routing.settings import RoutingConfig
from hybrid_gateway.stores.settings import StoresConfig
from hybrid_gateway.tenancy.settings import AuthConfig, LimitsConfig, TenantConfig
from hybrid_gateway.upstreams.pool.settings import (
    BalancingConfig,
    EndpointConfig,
    EndpointHealthConfig,
    endpoint_names,
)
from hybrid_gateway.upstreams.profiles import ProfileName


class RequestLogConfig(_Strict):
    # Relative paths are resolved against the config file's folder.
    path: str = "var/requests.sqlite3"
    # The write-ahead journal is appended on every request; SQLite is fed from it in batches.
    flush_interval_ms: PositiveInt = 200
    enabled: bool = True
    # Rows older than this are deleted on start and then about once an hour (None: kept forever).
    retention_days: PositiveFloat | None = None
    # What the `prompt` column keeps of the last user message (observability/prompts.py).
    prompts: PromptMode = "none"


class LogConfig(_Strict):
    """The console log on stderr (observability/logs.py); ``serve --log-level`` overrides level."""

    format: Literal["logfmt", "json"] = "logfmt"
    # INFO: one line per request; WARNING: retries, fallbacks, breakers, stores and errors only
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    # lines below WARNING are written in chunks at most this often (one write per line cost a
    # sixth of the pass-through at INFO); WARNING and above at once; 0: every line at once
    flush_interval_ms: Annotated[int, Field(ge=0)] = 200


class HealthConfig(_Strict):
    # /healthz says "degraded" and names a channel whose last N requests all failed
    failed_requests: PositiveInt = 5


class GcConfig(_Strict):
    # The young generation is also collected every this many ms, so one pause only covers what
    # one interval allocated (observability/gc_pacer.py); 0: the interpreter's count alone
    young_interval_ms: Annotated[int, Field(ge=0)] = 100


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8080
    max_body_bytes: PositiveInt = 1024 * 1024
    # Every request header, names and values, together (431 above; security review, issue 10).
    max_header_bytes: PositiveInt = 32 * 1024
    # Messages in one chat request (400 array_above_max_length above).
    max_messages: PositiveInt = 2048
    request_log: RequestLogConfig = RequestLogConfig()
    log: LogConfig = LogConfig()
    health: HealthConfig = HealthConfig()
    gc: GcConfig = GcConfig()


class ChannelConfig(_Strict):
    """One OpenAI-compatible upstream (vLLM, SGLang, llama.cpp, Ollama, OpenAI, ...): one
    ``base_url``, or several ``endpoints`` serving the same model (upstreams/pool/)."""

    base_url: Annotated[str, Field(pattern=r"^https?://")]
    # Several servers of the same model behind this channel, balanced by ``balancing`` and
    # ejected by ``health`` when failing; base_url (the one-endpoint form) is then left out.
    endpoints: Annotated[tuple[EndpointConfig, ...], Field(min_length=1)] | None = None
    balancing: BalancingConfig = BalancingConfig()
    health: EndpointHealthConfig = EndpointHealthConfig()
    model: Annotated[str, Field(min_length=1)]
    # Name of the environment variable holding the key; the key itself never sits in the file.
    api_key_env: str | None = None
    # A PEM bundle of extra CAs to trust for an https base_url (e.g. a private CA in front of
    # a self-hosted vLLM); the system's trust store is used when omitted.
    ca_file: str | None = None
    price_per_1m_input: NonNegFloat = 0.0
    price_per_1m_output: NonNegFloat = 0.0
    timeout_s: PositiveFloat = 60.0
    connect_timeout_s: PositiveFloat = 3.0
    max_concurrency: PositiveInt = 64
    # How long a request may wait for one of max_concurrency slots before a 503.
    queue_timeout_s: PositiveFloat = 10.0
    # What this server misreads, rewritten or refused with 400 (upstreams/profiles.py); auto:
    # detected from GET /models on the first request. openai: sent as the client sent it.
    profile: ProfileName = ProfileName.OPENAI
    # The model's context size: max_tokens / max_completion_tokens above it are a 400.
    context_tokens: PositiveInt | None = None
    # Largest n a profile without native n answers by parallel calls (0: n > 1 is a 400).
    fan_out_n: Annotated[int, Field(ge=0, le=128)] = 16
    # With endpoints: a stream that breaks mid-way (its server died) is sent again to another
    # endpoint and the client's stream continues where it stopped, if the new answer repeats
    # what was sent word for word (else the client sees the break, as without it).
    # ``deterministic``: when the request asked temperature 0 or a seed; ``always``: for
    # servers that answer a prompt the same way each time; ``off`` (upstreams/pool/resume.py).
    resume_streams: Literal["off", "deterministic", "always"] = "deterministic"

    @model_validator(mode="before")
    @classmethod
    def _endpoints_or_base_url(cls, data: Any) -> Any:
        """``endpoints`` stand in for ``base_url`` (the first one's URL fills it)."""
        if isinstance(data, Mapping) and data.get("endpoints") is not None:
            if "base_url" in data:
                raise _FieldError("base_url", "either base_url or endpoints, not both")
            listed = data["endpoints"]
            if isinstance(listed, list) and not listed:
                raise _FieldError("endpoints", "at least one endpoint")
            first = listed[0] if isinstance(listed, list) else None
            url = first.get("url") if isinstance(first, Mapping) else None
            # a bad first URL is reported at endpoints.0.url, not at base_url
            ok = isinstance(url, str) and url.startswith(("http://", "https://"))
            return {**data, "base_url": url if ok else "http://endpoints.invalid"}
        return data

    @model_validator(mode="after")
    def _unique_endpoint_names(self) -> ChannelConfig:
        if self.endpoints is not None:
            names = endpoint_names(self.endpoints)
            for i, name in enumerate(names):
                if names.index(name) != i:
                    raise _FieldError(f"endpoints.{i}.name", f"a unique name, got {name!r} twice")
        return self


class LaneConfig(_Strict):
    channel: str
    # Answers while ``channel``'s circuit breaker is open.
    backup: str | None = None
    # Also retry a failed attempt on ``backup`` at once (no retry budget spent, marked failover).
    retry_on_backup: bool = False
    # This lane's own slots and bounded queue on each of its channels (resilience/lanes.py).
    queue: LaneQueueConfig | None = None
    # Past this many seconds without an answer (streams: without a first byte) the request is
    # answered from ``fallback_lane`` while this lane's answer is kept for later delivery.
    deadline_s: PositiveFloat | None = None
    fallback_lane: str | None = None
    # What deadline_s waits for in a non-streamed request: the whole ``answer``, or its
    # ``first_token`` (the gateway streams it from the upstream and assembles it, as for a
    # streamed request), so that a long answer in progress is not taken for a fault.
    deadline_on: Literal["answer", "first_token"] = "answer"
    # With ``first_token``: a non-streamed answer whose tokens stop for this long falls back too.
    stall_s: PositiveFloat | None = None


class RetryConfig(_Strict):
    enabled: bool = True
    # One wait per retry: len(backoff_s) + 1 attempts at most.
    backoff_s: tuple[NonNegFloat, ...] = (0.2, 0.5, 1.0)
    jitter: Annotated[float, Field(ge=0, le=1)] = 0.2
    # An upstream Retry-After longer than the backoff is honoured up to this.
    max_retry_after_s: NonNegFloat = 5.0
    # Retries may not exceed this share of requests (plus the floor) over a 10 s window.
    budget_ratio: NonNegFloat = 0.1
    budget_min_per_s: NonNegFloat = 1.0
    # No retry starts once this much time has passed since the request was dispatched: a
    # request whose attempt timed out after a channel's full timeout_s is not tried again.
    max_elapsed_s: PositiveFloat = 10.0


class BreakerConfig(_Strict):
    enabled: bool = True
    window_s: PositiveFloat = 30.0
    min_requests: PositiveInt = 20
    error_rate: Annotated[float, Field(gt=0, le=1)] = 0.2
    open_s: PositiveFloat = 30.0
    half_open_probes: Annotated[int, Field(ge=1, le=100)] = 1
    # A failure the server answered (a 5xx with a body: it may follow from the request) counts
    # only once this many tenants/keys failed in the window, or if its request's shape was
    # answered before by the server; connection errors and timeouts always count.  1: all count.
    min_distinct_callers: PositiveInt = 2


class ResilienceConfig(_Strict):
    retry: RetryConfig = RetryConfig()
    breaker: BreakerConfig = BreakerConfig()
    deferred: DeferredConfig = DeferredConfig()
    shedding: SheddingConfig = SheddingConfig()


class ModelConfig(_Strict):
    """A model id clients may ask for; ``lane: null`` means "route it for me"."""

    id: Annotated[str, Field(min_length=1)]
    lane: str | None = None
    description: str = ""


class ExactCacheConfig(_Strict):
    enabled: bool = True
    ttl_s: PositiveFloat = 3600.0
    max_entries: PositiveInt = 10_000
    max_bytes: PositiveInt = 64 * 1024 * 1024


class CacheConfig(_Strict):
    exact: ExactCacheConfig = ExactCacheConfig()
    semantic: SemanticCacheConfig = SemanticCacheConfig()


def _default_models() -> tuple[ModelConfig, ...]:
    return (
        ModelConfig(id="auto", description="routed: light or heavy per request"),
        ModelConfig(id="light", lane="light", description="always the light lane"),
        ModelConfig(id="heavy", lane="heavy", description="always the heavy lane"),
    )


class GatewayConfig(_Strict):
    server: ServerConfig = ServerConfig()
    channels: Mapping[str, ChannelConfig]
    lanes: Mapping[str, LaneConfig]
    models: tuple[ModelConfig, ...] = Field(default_factory=_default_models)
    routing: RoutingConfig = RoutingConfig()
    cache: CacheConfig = CacheConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    resilience: ResilienceConfig = ResilienceConfig()
    auth: AuthConfig = AuthConfig()
    tenants: Mapping[str, TenantConfig] = Field(default_factory=dict)
    limits: LimitsConfig = LimitsConfig()
    # Where rate buckets, budgets, breaker state, the exact cache and deferred results live
    # (this process, or one Redis shared by replicas); see stores/settings.py.
    stores: StoresConfig = StoresConfig()
    # Audited decisions: shadow requests, judges, verdicts (learning/settings.py).
    learning: LearningConfig = LearningConfig()

    @model_validator(mode="after")
    def _cross_references(self) -> GatewayConfig:
        for name, lane in self.lanes.items():
            must_exist(lane.channel, self.channels, f"lanes.{name}.channel", "a channel name")
            if lane.backup is not None:
                must_exist(lane.backup, self.channels, f"lanes.{name}.backup", "a channel name")
                if lane.backup == lane.channel:
                    raise _FieldError(f"lanes.{name}.backup", "a channel other than the lane's own")
        _check_degradation(self)
        for field, lane_name in lanes_named(self.learning.audit):
            must_exist(lane_name, self.lanes, field, "a lane name")
        must_exist(self.routing.default_lane, self.lanes, "routing.default_lane", "a lane name")
        for i, rule in enumerate(self.routing.rules):
            if rule.lane is not None:
                must_exist(rule.lane, self.lanes, f"routing.rules.{i}.lane", "a lane name")
        if self.routing.learned or self.routing.gates is not None:
            for key in ("simple_lane", "complex_lane"):
                lane = getattr(self.routing, key)
                must_exist(lane, self.lanes, f"routing.{key}", "a lane name")
        seen: set[str] = set()
        for i, model in enumerate(self.models):
            if model.id in seen:
                raise _FieldError(
                    f"models.{i}.id", f"a unique model id, got duplicate {model.id!r}"
                )
            seen.add(model.id)
            if model.lane is not None:
                must_exist(model.lane, self.lanes, f"models.{i}.lane", "a lane name")
        for name, tenant in self.tenants.items():
            for j, lane_name in enumerate(tenant.lanes or ()):
                must_exist(lane_name, self.lanes, f"tenants.{name}.lanes.{j}", "a lane name")
            if tenant.budget is not None and tenant.budget.on_exceed == "downgrade":
                must_exist(
                    tenant.budget.downgrade_lane, self.lanes,
                    f"tenants.{name}.budget.downgrade_lane", "a lane name",
                )  # fmt: skip
        return self


def _check_degradation(config: GatewayConfig) -> None:
    """Deadline fallbacks point at other lanes; lane queues fit inside their channels."""
    shares: dict[str, int] = {}
    for name, lane in config.lanes.items():
        if lane.retry_on_backup and lane.backup is None:
            raise _FieldError(f"lanes.{name}.retry_on_backup", "a backup channel on the lane")
        if (lane.deadline_s is None) != (lane.fallback_lane is None):
            raise _FieldError(
                f"lanes.{name}.fallback_lane", "deadline_s and fallback_lane given together"
            )
        if lane.deadline_on != "answer" and lane.deadline_s is None:
            raise _FieldError(f"lanes.{name}.deadline_on", "a deadline_s with it")
        if lane.stall_s is not None and lane.deadline_on != "first_token":
            raise _FieldError(f"lanes.{name}.stall_s", "deadline_on: first_token with it")
        if lane.fallback_lane is not None:
            field = f"lanes.{name}.fallback_lane"
            must_exist(lane.fallback_lane, config.lanes, field, "a lane name")
            if lane.fallback_lane == name:
                raise _FieldError(field, "a lane other than the lane itself")
        if lane.queue is not None:
            for channel in (lane.channel, lane.backup):
                if channel is not None:
                    shares[channel] = shares.get(channel, 0) + lane.queue.max_concurrency
    for channel, share in shares.items():
        limit = config.channels[channel].max_concurrency if channel in config.channels else share
        if share > limit:
            raise _FieldError(
                f"channels.{channel}.max_concurrency",
                f"at least the lanes' queue.max_concurrency on it ({share}), got {limit}",
            )
    simpler = config.resilience.shedding.simpler_model
    if simpler is not None:
        models = {m.id: m for m in config.models}
        must_exist(simpler, models, "resilience.shedding.simpler_model", "a model id")


def parse_config(data: Any, source: str = "<config>") -> GatewayConfig:
    """Validate an already-loaded mapping; raise ``ConfigError`` naming ``source``.

    Then the checks across sections that ``serve`` would otherwise meet only while building
    its runtime (``config_checks.py``).
    """
    if not isinstance(data, dict):
        raise ConfigError(
            source, "<root>", f"a mapping at the top level, got {type(data).__name__}"
        )
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise _config_error(source, exc) from None
    cross_checks(config, source)
    return config


def _config_error(source: str, exc: ValidationError) -> ConfigError:
    first = exc.errors()[0]
    ctx_error = (first.get("ctx") or {}).get("error")
    if isinstance(ctx_error, _FieldError):
        # a nested section's validator names its field from there (channels.NAME.<field>)
        where = ".".join(str(part) for part in first["loc"])
        field = f"{where}.{ctx_error.field}" if where else ctx_error.field
        return ConfigError(source, field, ctx_error.expected)
    field = ".".join(str(part) for part in first["loc"]) or "<root>"
    expected = first["msg"]
    if first["type"] == "extra_forbidden":
        expected = "no such key (unknown keys are errors; check the spelling)"
    elif first["type"] != "missing" and "input" in first:
        expected = f"{expected}, got {first['input']!r}"
    return ConfigError(source, field, expected)


def load_config(path: str | os.PathLike[str]) -> GatewayConfig:
    """Read and validate a YAML config file."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(source, "<file>", f"a readable file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(source, f"byte {exc.start}", "UTF-8 text") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "<file>"
        raise ConfigError(source, where, f"valid YAML ({getattr(exc, 'problem', exc)})") from None
    except RecursionError:  # PyYAML's composer recurses once per nesting level
        raise ConfigError(source, "<file>", "YAML nested less deeply") from None
    return parse_config(data, source)


def resolve_path(config_file: str | os.PathLike[str] | None, path: str) -> Path:
    """Resolve a path from the config relative to the config file's folder."""
    candidate = Path(path)
    if candidate.is_absolute() or config_file is None:
        return candidate
    return Path(config_file).resolve().parent / candidate


def read_env(name: str, field: str, source: str = "<config>") -> str:
    """A secret the config names by environment variable (e.g. ``embedding.api_key_env``)."""
    value = os.environ.get(name, "")
    if not value:
        raise ConfigError(source, field, f"environment variable {name} to be set")
    return value


def read_api_key(channel_name: str, channel: ChannelConfig, source: str = "<config>") -> str | None:
    """The one place environment variables are read: a channel's API key."""
    if channel.api_key_env is None:
        return None
    value = os.environ.get(channel.api_key_env, "")
    if not value:
        raise ConfigError(
            source,
            f"channels.{channel_name}.api_key_env",
            f"environment variable {channel.api_key_env} to be set to the channel's API key",
        )
    return value
