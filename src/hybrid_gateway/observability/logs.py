"""Structured logs on stderr: one line per log record, logfmt or JSON (``server.log``).

Stdlib ``logging`` only.  ``configure_logging`` puts one handler on the root logger, so every
module's ``logging.getLogger(__name__)`` lines come out in the chosen format, and each line
carries the id of the request it was written for (a context variable the chat handler binds:
``bind_request_id``).

What the gateway itself logs here (beside what other modules log on their own, e.g. a shared
store going down):

* ``msg=request`` once per chat completion (``RequestLines``), at INFO; WARNING when a fallback
  answered (``breaker``, ``failover``, ``timeout``, ``shed``); ERROR for a 5xx.  The fields are
  the decisions (``REQUEST_FIELDS``), never a prompt, an answer or an API key;
* ``msg=retry`` (WARNING) for each retried attempt, ``msg=breaker`` (WARNING) for each breaker
  state change: ``RequestLines`` is the dispatcher's retry listener and the breakers' listener.

A request line costs one ``LogRecord`` and one write: its fields are read from the request's
record only when a handler formats it, so a level that drops it formats nothing.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar, Token
from typing import IO, Literal

import orjson

from hybrid_gateway.resilience.breaker import BreakerState
from hybrid_gateway.types import RequestRecord

__all__ = [
    "LEVELS",
    "REQUEST_FIELDS",
    "LogFormat",
    "RequestLines",
    "bind_request_id",
    "configure_logging",
    "request_level",
    "unbind_request_id",
]

LogFormat = Literal["logfmt", "json"]
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
REQUEST_LOGGER = "hybrid_gateway.request"

_REQUEST_ID: ContextVar[str | None] = ContextVar("hybrid_gateway_request_id", default=None)


def bind_request_id(request_id: str) -> Token[str | None]:
    """Lines logged by this task from now on carry ``request_id`` (until ``unbind``)."""
    return _REQUEST_ID.set(request_id)


def unbind_request_id(token: Token[str | None]) -> None:
    _REQUEST_ID.reset(token)


# -- the request line ---------------------------------------------------------------------------
def _route(attr: str) -> Callable[[RequestRecord], object]:
    return lambda r: getattr(r.route, attr) if r.route is not None else None


def _usage(attr: str) -> Callable[[RequestRecord], object]:
    return lambda r: getattr(r.usage, attr) if r.usage is not None else None


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


# name -> how to read it off the record, in line order.  Never the prompt, the answer or a key.
REQUEST_FIELDS: dict[str, Callable[[RequestRecord], object]] = {
    "tenant": lambda r: r.tenant,
    "app": lambda r: r.app,
    "model": lambda r: r.model,
    "stream": lambda r: r.stream,
    "lane": _route("lane"),
    "channel": _route("channel"),
    "rule": _route("rule"),
    "cache": lambda r: r.cache.value,
    "status": lambda r: r.status,
    "error": lambda r: r.error_code,
    "latency_ms": lambda r: _ms(r.latency_ms),
    "ttft_ms": lambda r: _ms(r.ttft_ms),
    "upstream_ms": lambda r: _ms(r.upstream_ms),
    "prompt_tokens": _usage("prompt_tokens"),
    "completion_tokens": _usage("completion_tokens"),
    "cost_usd": lambda r: round(r.cost_usd, 10),
    "retries": lambda r: r.retries,
    "fallback": lambda r: r.fallback,
}


def request_level(record: RequestRecord) -> int:
    if record.status >= 500:
        return logging.ERROR
    return logging.WARNING if record.fallback is not None else logging.INFO


class RequestLines:
    """Writes the request lines, and the retry and breaker events (a listener of both)."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._log = logger or logging.getLogger(REQUEST_LOGGER)

    def request(self, record: RequestRecord) -> None:
        level = request_level(record)
        if self._log.isEnabledFor(level):
            # the record itself travels; its fields are read only if a handler formats it
            self._log.log(level, "request", extra={"request": record})

    def retry(self, channel: str, code: str) -> None:
        self._log.warning("retry", extra={"fields": {"channel": channel, "code": code}})

    def state_change(self, channel: str, old: BreakerState, new: BreakerState) -> None:
        fields = {"channel": channel, "old": old.value, "new": new.value}
        self._log.warning("breaker", extra={"fields": fields})


# -- formatting ---------------------------------------------------------------------------------
def _pairs(record: logging.LogRecord) -> Iterator[tuple[str, object]]:
    yield "ts", _timestamp(record.created)
    yield "level", record.levelname
    yield "logger", record.name
    yield "msg", record.getMessage()
    request_id = getattr(record, "request_id", None)
    if request_id is not None:
        yield "request_id", request_id
    request = getattr(record, "request", None)
    if isinstance(request, RequestRecord):
        if request_id is None:
            yield "request_id", request.request_id
        for name, read in REQUEST_FIELDS.items():
            yield name, read(request)
    fields = getattr(record, "fields", None)
    if isinstance(fields, dict):
        yield from fields.items()
    if record.exc_info and record.exc_info[0] is not None:
        yield "exc", logging.Formatter().formatException(record.exc_info)
    elif record.exc_text:
        yield "exc", record.exc_text


def _timestamp(created: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        return orjson.dumps(dict(_pairs(record)), default=str).decode()


class LogfmtFormatter(logging.Formatter):
    """``key=value`` pairs; a value with a space, ``=`` or ``"`` is quoted, escapes kept on
    one line.  ``None`` is an empty value."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{key}={_logfmt_value(value)}" for key, value in _pairs(record))


def _logfmt_value(value: object) -> str:
    if value is None:
        return ""
    if value is True or value is False:
        return "true" if value else "false"
    text = value if isinstance(value, str) else str(value)
    if text and not any(c in text for c in ' ="\\\n\r\t'):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t") + '"'


FORMATTERS: dict[str, type[logging.Formatter]] = {
    "logfmt": LogfmtFormatter,
    "json": JsonFormatter,
}


class _RequestIdFilter(logging.Filter):
    """Stamps each line with the request id bound in the current task, if any."""

    def filter(self, record: logging.LogRecord) -> bool:
        request_id = _REQUEST_ID.get()
        if request_id is not None:
            record.request_id = request_id
        return True


class _GatewayHandler(logging.StreamHandler[IO[str]]):
    """Marks the handler ``configure_logging`` installed, to replace it on a second call."""


def configure_logging(fmt: LogFormat, level: str, stream: IO[str] | None = None) -> None:
    """One handler on the root logger, writing ``fmt`` lines at ``level`` and above to stderr.

    Also switches off what no line shows (the caller's file and line, thread and process
    names): ``logging``'s documented knobs for cheaper records.
    """
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _GatewayHandler)]:
        root.removeHandler(handler)
    handler = _GatewayHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(FORMATTERS[fmt]())
    handler.addFilter(_RequestIdFilter())
    root.addHandler(handler)
    root.setLevel(level)
    logging._srcfile = None  # no sys._getframe per record
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
