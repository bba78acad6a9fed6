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

A request line at INFO, where the gateway's own handler is the only place it can go (the
usual case: ``configure_logging``'s handler, no other handler, filter or record factory), is
a tuple of its fields handed to that handler (``ConsoleHandler.emit_later``) and formatted
with its chunk: no ``LogRecord``, no handling, and the same text (a test holds the two paths
equal).  Anywhere else it is a ``LogRecord`` as any line, its fields read from the request's
record only when a handler formats it, so a level that drops it formats nothing.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from contextvars import ContextVar, Token
from typing import IO, Any, Literal

import orjson

from hybrid_gateway.observability.log_handler import ConsoleHandler
from hybrid_gateway.resilience.breaker import BreakerState
from hybrid_gateway.types import RequestRecord

__all__ = [
    "LEVELS",
    "REQUEST_FIELDS",
    "JsonFormatter",
    "LogFormat",
    "LogfmtFormatter",
    "RequestLines",
    "bind_request_id",
    "configure_logging",
    "request_level",
    "request_pairs",
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
# The request line's fields after ts, level, logger, msg and request_id, in line order.  Never
# the prompt, the answer or a key.
REQUEST_FIELDS = (
    "tenant", "app", "model", "stream", "lane", "channel", "rule", "cache", "status", "error",
    "latency_ms", "ttft_ms", "upstream_ms", "prompt_tokens", "completion_tokens", "cost_usd",
    "retries", "fallback",
)  # fmt: skip


# A request line's fields as they were when it was logged: (created, levelname, logger name,
# request_id, tenant, app, model, stream, route, cache, status, error, latency_ms, ttft_ms,
# upstream_ms, usage, cost_usd, retries, fallback).  A tuple: made once per request.
Line = tuple[Any, ...]


def line_of(r: RequestRecord, created: float, level: str, logger: str) -> Line:
    """The request line's fields read off the record now (its route and usage are frozen)."""
    return (
        created, level, logger, r.request_id, r.tenant, r.app, r.model, r.stream, r.route,
        r.cache, r.status, r.error_code, r.latency_ms, r.ttft_ms, r.upstream_ms, r.usage,
        r.cost_usd, r.retries, r.fallback,
    )  # fmt: skip


def request_pairs(r: RequestRecord) -> list[tuple[str, object]]:
    """``REQUEST_FIELDS`` read off the record (one call: this runs once per request)."""
    return _line_pairs(line_of(r, 0.0, "", ""))


def _line_pairs(line: Line) -> list[tuple[str, object]]:
    (_, _, _, _, tenant, app, model, stream, route, cache, status, error, latency_ms, ttft_ms,
     upstream_ms, usage, cost_usd, retries, fallback) = line  # fmt: skip
    return [
        ("tenant", tenant), ("app", app), ("model", model), ("stream", stream),
        ("lane", route.lane if route else None), ("channel", route.channel if route else None),
        ("rule", route.rule if route else None), ("cache", cache.value),
        ("status", status), ("error", error), ("latency_ms", _ms(latency_ms)),
        ("ttft_ms", _ms(ttft_ms)), ("upstream_ms", _ms(upstream_ms)),
        ("prompt_tokens", usage.prompt_tokens if usage else None),
        ("completion_tokens", usage.completion_tokens if usage else None),
        ("cost_usd", round(cost_usd, 10)), ("retries", retries), ("fallback", fallback),
    ]  # fmt: skip


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _ms_text(value: float | None) -> str:
    """``_logfmt_value(_ms(value))`` in one call."""
    return "" if value is None else str(round(value, 2))


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
        log = self._log
        if log.isEnabledFor(level):
            handler = _sole_handler(log, level) if level < logging.WARNING else None
            if handler is not None:  # the line's fields now, its text with its chunk
                handler.emit_later(line_of(record, time.time(), _LEVEL_NAMES[level], log.name))
                return
            # What ``log.log(level, "request", extra={"request": record})`` makes (no caller
            # frame: configure_logging turns that off), without its argument handling: the
            # record itself travels, its fields read only if a handler formats it.  Filters,
            # handlers and propagation are the logger's own (``handle``).
            line = logging.getLogRecordFactory()(
                log.name, level, "(unknown file)", 0, "request", None, None, "(unknown function)"
            )
            line.request = record
            log.handle(line)

    def retry(self, channel: str, code: str) -> None:
        self._log.warning("retry", extra={"fields": {"channel": channel, "code": code}})

    def state_change(self, channel: str, old: BreakerState, new: BreakerState) -> None:
        fields = {"channel": channel, "old": old.value, "new": new.value}
        self._log.warning("breaker", extra={"fields": fields})


_LEVEL_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO"}


def _sole_handler(log: logging.Logger, level: int) -> _GatewayHandler | None:
    """The gateway's handler, when a ``level`` line of ``log`` can go nowhere else and nothing
    would see its ``LogRecord`` first (a filter, another handler, a record factory)."""
    if log.disabled or log.filters or logging.getLogRecordFactory() is not _RECORD_FACTORY:
        return None
    node = log
    while node.parent is not None:  # up to the root, as Logger.callHandlers walks
        if node.handlers or not node.propagate:
            return None
        node = node.parent
    if len(node.handlers) != 1:
        return None
    handler = node.handlers[0]
    if (
        type(handler) is not _GatewayHandler
        or level < handler.level
        or len(handler.filters) != 1  # configure_logging's request-id filter alone
        or type(handler.filters[0]) is not _RequestIdFilter
        or type(handler.formatter) not in _LINE_FORMATTERS
    ):
        return None
    return handler


_RECORD_FACTORY = logging.LogRecord  # logging's own; a program may install another


# -- formatting ---------------------------------------------------------------------------------
def _pairs(record: logging.LogRecord) -> list[tuple[str, object]]:
    fields = record.__dict__
    pairs: list[tuple[str, object]] = [
        ("ts", _timestamp(record.created)), ("level", record.levelname),
        ("logger", record.name), ("msg", record.getMessage()),
    ]  # fmt: skip
    request_id = fields.get("request_id")
    request = fields.get("request")
    if isinstance(request, RequestRecord):  # its own id (a late answer's is ``….late``)
        pairs.append(("request_id", request.request_id))
        pairs += request_pairs(request)
    elif request_id is not None:
        pairs.append(("request_id", request_id))
    extra = fields.get("fields")
    if isinstance(extra, dict):
        pairs += extra.items()
    if record.exc_info and record.exc_info[0] is not None:
        pairs.append(("exc", _EXC_FORMATTER.formatException(record.exc_info)))
    elif record.exc_text:
        pairs.append(("exc", record.exc_text))
    return pairs


_EXC_FORMATTER = logging.Formatter()


def _timestamp(created: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        return orjson.dumps(dict(_pairs(record)), default=str).decode()

    def request_text(self, line: Line) -> str:
        """A request line from its fields, as ``format`` writes its ``LogRecord``."""
        pairs: list[tuple[str, object]] = [
            ("ts", _timestamp(line[0])), ("level", line[1]), ("logger", line[2]),
            ("msg", "request"), ("request_id", line[3]),
        ]  # fmt: skip
        pairs += _line_pairs(line)
        return orjson.dumps(dict(pairs), default=str).decode()


class LogfmtFormatter(logging.Formatter):
    """``key=value`` pairs; a value with a space, ``=`` or ``"`` is quoted, escapes kept on
    one line.  ``None`` is an empty value."""

    def __init__(self) -> None:
        super().__init__()
        # names that recur on request lines (tenant, lane, rule, ...) -> as written; bounded
        self._words: dict[str | None, str] = {None: ""}
        self._runs: dict[tuple[object, ...], str] = {}  # see _request
        self._second, self._stamp = -1, ""  # the timestamp's seconds, formatted once each

    def format(self, record: logging.LogRecord) -> str:
        request = record.__dict__.get("request")
        if type(request) is RequestRecord and not record.exc_info:  # the line of every request
            return self._request(record, request)
        return " ".join([f"{key}={_logfmt_value(value)}" for key, value in _pairs(record)])

    def _request(self, record: logging.LogRecord, r: RequestRecord) -> str:
        text = self.request_text(line_of(r, record.created, record.levelname, record.name),
                                 record.getMessage())  # fmt: skip
        return text + _logfmt_extra(record)

    def request_text(self, line: Line, msg: str = "request") -> str:
        """A request line as the generic path writes it (a test holds them equal), in one
        f-string: the line written once per request costs a third of the generic one.  The
        runs of fields that repeat from request to request (level to msg; tenant to rule) are
        formatted once per distinct run and kept, like the words."""
        (created, level, logger, request_id, tenant, app, model, stream, route, cache, status,
         error, latency_ms, ttft_ms, upstream_ms, usage, cost_usd, retries, fallback) = line
        w = self._word
        head = (level, logger, msg)
        first = self._runs.get(head)
        if first is None:
            first = self._keep(head, f"level={level} logger={logger} msg={w(msg)}")
        where = (route.lane, route.channel, route.rule) if route else (None, None, None)
        who = (tenant, app, model, stream, *where)
        second = self._runs.get(who)
        if second is None:
            second = self._keep(who, (
                f"tenant={w(tenant)} app={w(app)} model={w(model)} "
                f"stream={'true' if stream else 'false'} lane={w(who[4])} "
                f"channel={w(who[5])} rule={w(who[6])}"
            ))  # fmt: skip
        return (
            f"ts={self._timestamp(created)} {first} request_id={_logfmt_value(request_id)} "
            f"{second} cache={cache.value} status={status} error={w(error)} "
            f"latency_ms={_ms_text(latency_ms)} ttft_ms={_ms_text(ttft_ms)} "
            f"upstream_ms={_ms_text(upstream_ms)} "
            f"prompt_tokens={usage.prompt_tokens if usage else ''} "
            f"completion_tokens={usage.completion_tokens if usage else ''} "
            f"cost_usd={round(cost_usd, 10)} retries={retries} fallback={w(fallback)}"
        )

    def _keep(self, key: tuple[object, ...], text: str) -> str:
        if len(self._runs) > _WORDS_KEPT:  # bounded like the words
            self._runs = {}
        self._runs[key] = text
        return text

    def _word(self, text: str | None) -> str:
        written = self._words.get(text)
        if written is None:
            if len(self._words) > _WORDS_KEPT:  # e.g. clients naming models that do not exist
                self._words = {None: ""}
            written = self._words[text] = _logfmt_value(text)
        return written

    def _timestamp(self, created: float) -> str:
        second = int(created)
        if second != self._second:
            self._second, self._stamp = second, _timestamp(second)[:-5]
        return f"{self._stamp}.{int(created % 1 * 1000):03d}Z"


_WORDS_KEPT = 4096


def _logfmt_extra(record: logging.LogRecord) -> str:
    extra = record.__dict__.get("fields")
    if not isinstance(extra, dict):
        return ""
    return "".join([f" {key}={_logfmt_value(value)}" for key, value in extra.items()])


def _logfmt_value(value: object) -> str:
    kind = type(value)  # exact types first: this runs some 25 times per line
    if kind is str:
        text = str(value)
    elif kind is int or kind is float:
        return str(value)
    elif value is None:
        return ""
    elif kind is bool:
        return "true" if value else "false"
    else:
        text = str(value)
    if text and _UNSAFE.search(text) is None:
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t") + '"'


_UNSAFE = re.compile(r'[\s="\\]')


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


_LINE_FORMATTERS = frozenset(FORMATTERS.values())  # each has request_text


class _GatewayHandler(ConsoleHandler):
    """The handler ``configure_logging`` installs (replaced on a second call); it renders the
    request lines ``RequestLines`` hands it (``emit_later``) with its formatter."""

    def render(self, entry: Line) -> str:
        formatter = self.formatter
        assert isinstance(formatter, LogfmtFormatter | JsonFormatter)  # _sole_handler checked
        return formatter.request_text(entry)


def configure_logging(
    fmt: LogFormat, level: str, stream: IO[str] | None = None, flush_interval_s: float = 0.0
) -> None:
    """One handler on the root logger, writing ``fmt`` lines at ``level`` and above to stderr;
    lines below WARNING in chunks every ``flush_interval_s`` (0: each at once; log_handler.py).

    Also switches off what no line shows (the caller's file and line, thread and process
    names): ``logging``'s documented knobs for cheaper records (about 2 us of the 18 us a
    request line costs).
    """
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _GatewayHandler)]:
        root.removeHandler(handler)
        handler.close()  # writes what it still holds
    handler = _GatewayHandler(stream if stream is not None else sys.stderr, flush_interval_s)
    handler.setFormatter(FORMATTERS[fmt]())
    handler.addFilter(_RequestIdFilter())
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)  # Python's warnings too, as lines of the same format
    logging._srcfile = None  # no sys._getframe per record
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
