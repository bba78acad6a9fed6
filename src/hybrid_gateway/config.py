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
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hybrid_gateway.errors import ConfigError

PositiveFloat = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RequestLogConfig(_Strict):
    # Relative paths are resolved against the config file's folder.
    path: str = "var/requests.sqlite3"
    # The write-ahead journal is appended on every request; SQLite is fed from it in batches.
    flush_interval_ms: PositiveInt = 200
    enabled: bool = True


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8080
    max_body_bytes: PositiveInt = 1024 * 1024
    request_log: RequestLogConfig = RequestLogConfig()


class ChannelConfig(_Strict):
    """One OpenAI-compatible upstream endpoint (vLLM, SGLang, llama.cpp, Ollama, OpenAI, ...)."""

    base_url: Annotated[str, Field(pattern=r"^https?://")]
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


class LaneConfig(_Strict):
    channel: str
    # Answers while ``channel``'s circuit breaker is open.
    backup: str | None = None


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


class ResilienceConfig(_Strict):
    retry: RetryConfig = RetryConfig()
    breaker: BreakerConfig = BreakerConfig()


class ModelConfig(_Strict):
    """A model id clients may ask for; ``lane: null`` means "route it for me"."""

    id: Annotated[str, Field(min_length=1)]
    lane: str | None = None
    description: str = ""


class RuleCondition(_Strict):
    """All given conditions must hold (AND); omitted ones are not checked."""

    keywords_any: tuple[str, ...] = ()
    max_chars: PositiveInt | None = None
    min_chars: PositiveInt | None = None
    has_code_block: bool | None = None
    max_user_turns: PositiveInt | None = None
    min_user_turns: PositiveInt | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> RuleCondition:
        if not any(value not in (None, ()) for value in self.model_dump().values()):
            raise ValueError("a rule needs at least one condition")
        return self


class RuleConfig(_Strict):
    name: Annotated[str, Field(min_length=1)]
    when: RuleCondition
    lane: str


class RoutingConfig(_Strict):
    default_lane: str = "heavy"
    rules: tuple[RuleConfig, ...] = ()


class ExactCacheConfig(_Strict):
    enabled: bool = True
    ttl_s: PositiveFloat = 3600.0
    max_entries: PositiveInt = 10_000
    max_bytes: PositiveInt = 64 * 1024 * 1024


class CacheConfig(_Strict):
    exact: ExactCacheConfig = ExactCacheConfig()


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
    resilience: ResilienceConfig = ResilienceConfig()

    @model_validator(mode="after")
    def _cross_references(self) -> GatewayConfig:
        for name, lane in self.lanes.items():
            _must_exist(lane.channel, self.channels, f"lanes.{name}.channel", "a channel name")
            if lane.backup is not None:
                _must_exist(lane.backup, self.channels, f"lanes.{name}.backup", "a channel name")
                if lane.backup == lane.channel:
                    raise _FieldError(f"lanes.{name}.backup", "a channel other than the lane's own")
        _must_exist(self.routing.default_lane, self.lanes, "routing.default_lane", "a lane name")
        for i, rule in enumerate(self.routing.rules):
            _must_exist(rule.lane, self.lanes, f"routing.rules.{i}.lane", "a lane name")
        seen: set[str] = set()
        for i, model in enumerate(self.models):
            if model.id in seen:
                raise _FieldError(
                    f"models.{i}.id", f"a unique model id, got duplicate {model.id!r}"
                )
            seen.add(model.id)
            if model.lane is not None:
                _must_exist(model.lane, self.lanes, f"models.{i}.lane", "a lane name")
        return self


class _FieldError(ValueError):
    def __init__(self, field: str, expected: str) -> None:
        super().__init__(expected)
        self.field = field
        self.expected = expected


def _must_exist(name: str, names: Mapping[str, Any], field: str, what: str) -> None:
    if name not in names:
        known = ", ".join(sorted(names)) or "none defined"
        raise _FieldError(field, f"{what} (one of: {known}), got {name!r}")


def parse_config(data: Any, source: str = "<config>") -> GatewayConfig:
    """Validate an already-loaded mapping; raise ``ConfigError`` naming ``source``."""
    if not isinstance(data, dict):
        raise ConfigError(
            source, "<root>", f"a mapping at the top level, got {type(data).__name__}"
        )
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise _config_error(source, exc) from None


def _config_error(source: str, exc: ValidationError) -> ConfigError:
    first = exc.errors()[0]
    ctx_error = (first.get("ctx") or {}).get("error")
    if isinstance(ctx_error, _FieldError):
        return ConfigError(source, ctx_error.field, ctx_error.expected)
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
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "<file>"
        raise ConfigError(source, where, f"valid YAML ({getattr(exc, 'problem', exc)})") from None
    return parse_config(data, source)


def resolve_path(config_file: str | os.PathLike[str] | None, path: str) -> Path:
    """Resolve a path from the config relative to the config file's folder."""
    candidate = Path(path)
    if candidate.is_absolute() or config_file is None:
        return candidate
    return Path(config_file).resolve().parent / candidate


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
