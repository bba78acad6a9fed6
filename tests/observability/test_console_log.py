"""The console log (observability/logs.py): line formats, levels, the bound request id."""

from __future__ import annotations

import io
import json
import logging
import shlex
import threading
from collections.abc import Iterator

import pytest

from hybrid_gateway.observability.log_handler import ConsoleHandler
from hybrid_gateway.observability.logs import (
    REQUEST_FIELDS,
    JsonFormatter,
    LogfmtFormatter,
    LogFormat,
    RequestLines,
    bind_request_id,
    configure_logging,
    request_level,
    request_pairs,
    unbind_request_id,
)
from hybrid_gateway.resilience.breaker import BreakerState
from hybrid_gateway.types import CacheOutcome, RequestRecord, RouteDecision, Usage


@pytest.fixture
def root_logging() -> Iterator[None]:
    """configure_logging changes the root logger: put it back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    knobs = {name: getattr(logging, name) for name in _KNOBS}
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, value in knobs.items():
            setattr(logging, name, value)
        logging.captureWarnings(False)


_KNOBS = ("_srcfile", "logThreads", "logProcesses", "logMultiprocessing")


def served(**changes: object) -> RequestRecord:
    record = RequestRecord(request_id="req_abc", started_at=1.0, model="auto", tenant="acme",
                           app="wiki", cache=CacheOutcome.MISS, status=200, latency_ms=12.345,
                           route=RouteDecision("light", "light-emu", "short-question"),
                           usage=Usage(10, 5), cost_usd=0.0000011, retries=1)  # fmt: skip
    for name, value in changes.items():
        setattr(record, name, value)
    return record


def logfmt(line: str) -> dict[str, str]:
    """A logfmt line read back (shlex handles the quoted values)."""
    return dict(part.split("=", 1) for part in shlex.split(line))


def lines_of(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_a_json_request_line_has_every_field(root_logging: None) -> None:
    out = io.StringIO()
    configure_logging("json", "INFO", out)
    RequestLines().request(served())
    (line,) = lines_of(out)
    fields = json.loads(line)
    assert set(REQUEST_FIELDS) | {"ts", "level", "logger", "msg", "request_id"} == set(fields)
    assert fields["msg"] == "request" and fields["level"] == "INFO"
    assert fields["request_id"] == "req_abc" and fields["tenant"] == "acme"
    assert (fields["lane"], fields["channel"], fields["rule"]) == (
        "light", "light-emu", "short-question"
    )  # fmt: skip
    assert fields["status"] == 200 and fields["latency_ms"] == 12.35
    assert fields["cost_usd"] == 0.0000011 and fields["retries"] == 1
    assert fields["fallback"] is None and fields["cache"] == "miss"


def test_the_request_fields_come_in_their_declared_order() -> None:
    assert [name for name, _ in request_pairs(served())] == list(REQUEST_FIELDS)


def _as_text(value: object) -> str:
    """A JSON value as logfmt writes it."""
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"route": None, "usage": None, "ttft_ms": 3.14159, "status": 404,
         "error_code": "model_not_found", "model": 'a "quoted" id with spaces'},
        {"fallback": "breaker", "stream": True, "tenant": "t=1", "upstream_ms": 0.001},
    ],
)  # fmt: skip
def test_the_logfmt_request_line_says_what_the_json_one_says(
    changes: dict[str, object],
) -> None:
    """logfmt writes request lines on a path of their own (one f-string); JSON goes through the
    generic pairs: both must carry the same fields and values."""
    record = logging.LogRecord("hybrid_gateway.request", logging.INFO, "", 0, "request", None, None)
    record.request = served(**changes)
    as_json = json.loads(JsonFormatter().format(record))
    as_logfmt = logfmt(LogfmtFormatter().format(record))
    assert list(as_logfmt) == list(as_json)
    assert as_logfmt == {key: _as_text(value) for key, value in as_json.items()}


def test_the_runs_a_logfmt_formatter_keeps_never_leak_between_lines() -> None:
    """The logfmt formatter keeps the runs of fields that repeat (tenant .. rule): one
    formatter writing different requests in turn, twice over, writes each as JSON says."""
    formatter = LogfmtFormatter()
    variants: list[dict[str, object]] = [
        {}, {"tenant": "t=1", "stream": True}, {"route": None}, {"app": "other"}, {"stream": True},
        {"tenant": "t=1", "stream": True, "status": 404}, {},
    ]  # fmt: skip
    for changes in variants * 2:
        record = logging.LogRecord("hybrid_gateway.request", 20, "", 0, "request", None, None)
        record.request = served(**changes)
        as_json = json.loads(JsonFormatter().format(record))
        assert logfmt(formatter.format(record)) == {k: _as_text(v) for k, v in as_json.items()}


def test_a_logfmt_line_quotes_what_needs_it_and_stays_one_line(root_logging: None) -> None:
    out = io.StringIO()
    configure_logging("logfmt", "INFO", out)
    log = logging.getLogger("hybrid_gateway.test")
    log.warning('a "quoted" value\nwith a newline', extra={"fields": {"path": "a b=c"}})
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    first, second = lines_of(out)
    assert logfmt(first)["msg"] == 'a "quoted" value\\nwith a newline'
    assert logfmt(first)["path"] == "a b=c" and logfmt(first)["level"] == "WARNING"
    assert logfmt(second)["level"] == "ERROR" and "ValueError: boom" in logfmt(second)["exc"]


def test_levels_info_warning_for_a_fallback_error_for_a_5xx() -> None:
    assert request_level(served()) == logging.INFO
    assert request_level(served(status=429, error_code="rate_limit_exceeded")) == logging.INFO
    assert request_level(served(fallback="breaker")) == logging.WARNING
    assert request_level(served(fallback="shed")) == logging.WARNING
    assert request_level(served(status=502, error_code="upstream_error")) == logging.ERROR


def test_retry_and_breaker_events_carry_the_bound_request_id(root_logging: None) -> None:
    out = io.StringIO()
    configure_logging("logfmt", "INFO", out)
    lines = RequestLines()
    token = bind_request_id("req_retry")
    try:
        lines.retry("heavy-emu", "upstream_unavailable")
        lines.state_change("heavy-emu", BreakerState.CLOSED, BreakerState.OPEN)
    finally:
        unbind_request_id(token)
    lines.retry("light-emu", "upstream_timeout")  # no request bound: no id
    retry, breaker, unbound = (logfmt(line) for line in lines_of(out))
    assert retry["msg"] == "retry" and retry["request_id"] == "req_retry"
    assert retry["level"] == "WARNING" and retry["code"] == "upstream_unavailable"
    assert (breaker["msg"], breaker["old"], breaker["new"]) == ("breaker", "closed", "open")
    assert "request_id" not in unbound


class _Counting(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def format(self, record: logging.LogRecord) -> str:
        self.calls += 1
        return ""


def test_a_request_line_below_the_level_is_never_formatted() -> None:
    logger = logging.getLogger("hybrid_gateway.test.quiet")
    logger.propagate = False
    handler = logging.StreamHandler(io.StringIO())
    formatter = _Counting()
    handler.setFormatter(formatter)
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    try:
        RequestLines(logger).request(served())
        assert formatter.calls == 0
        RequestLines(logger).request(served(status=503, error_code="circuit_open"))
        assert formatter.calls == 1
    finally:
        logger.removeHandler(handler)


# -- chunked writes (observability/log_handler.py) ----------------------------------------------
class _Writes(io.StringIO):
    """A stream that counts its write calls."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def _handler(stream: io.StringIO, interval_s: float, max_lines: int = 256) -> ConsoleHandler:
    handler = ConsoleHandler(stream, interval_s, max_lines)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    return handler


def _record(level: int, text: str) -> logging.LogRecord:
    return logging.LogRecord("hybrid_gateway.test", level, "", 0, text, None, None)


def test_info_lines_wait_for_a_chunk_and_a_warning_writes_them_first_in_order() -> None:
    out = _Writes()
    handler = _handler(out, interval_s=3600)
    try:
        for n in range(3):
            handler.handle(_record(logging.INFO, f"line {n}"))
        assert out.getvalue() == "" and handler.waiting == 3
        handler.handle(_record(logging.WARNING, "retry"))
        assert lines_of(out) == ["INFO line 0", "INFO line 1", "INFO line 2", "WARNING retry"]
        assert out.writes == 1 and handler.waiting == 0
    finally:
        handler.close()


def test_a_full_chunk_is_written_at_once_and_close_writes_the_rest() -> None:
    out = _Writes()
    handler = _handler(out, interval_s=3600, max_lines=4)
    for n in range(6):
        handler.handle(_record(logging.INFO, f"line {n}"))
    assert len(lines_of(out)) == 4 and out.writes == 1
    handler.close()
    assert lines_of(out) == [f"INFO line {n}" for n in range(6)]


def test_interval_zero_writes_each_line_as_it_comes() -> None:
    out = _Writes()
    handler = _handler(out, interval_s=0)
    handler.handle(_record(logging.DEBUG, "a"))
    handler.handle(_record(logging.INFO, "b"))
    assert lines_of(out) == ["DEBUG a", "INFO b"] and out.writes == 2
    handler.close()


def test_the_flusher_thread_writes_a_quiet_gateways_last_lines() -> None:
    out = _Writes()
    handler = _handler(out, interval_s=0.01)
    try:
        handler.handle(_record(logging.INFO, "last"))
        written = threading.Event()
        for _ in range(500):  # the thread's first tick is 10 ms away; allow a loaded machine
            if out.getvalue():
                written.set()
                break
            written.wait(0.01)
        assert lines_of(out) == ["INFO last"]
    finally:
        handler.close()


def test_a_broken_stream_loses_the_chunk_not_the_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError("stderr is gone")

    handler = _handler(Broken(), interval_s=3600)
    handler.handle(_record(logging.INFO, "kept back"))
    handler.handle(_record(logging.ERROR, "boom"))  # logging reports it on stderr; no raise
    handler.close()
    assert "stderr is gone" in capsys.readouterr().err


def test_serve_configures_chunked_console_lines(root_logging: None) -> None:
    out = io.StringIO()
    configure_logging("logfmt", "INFO", out, flush_interval_s=3600)
    RequestLines().request(served())
    assert out.getvalue() == ""
    logging.getLogger("hybrid_gateway.test").warning("now")
    request, warning = (logfmt(line) for line in lines_of(out))
    assert request["msg"] == "request" and warning["msg"] == "now"
    configure_logging("logfmt", "INFO", out)  # a second call closes the first handler


def _without_ts(line: str, fmt: str) -> object:
    if fmt == "json":
        fields = json.loads(line)
        fields.pop("ts")
        return fields
    return {key: value for key, value in logfmt(line).items() if key != "ts"}


@pytest.mark.parametrize("fmt", ["logfmt", "json"])
@pytest.mark.parametrize(
    "changes",
    [{}, {"route": None, "usage": None, "ttft_ms": 3.14159, "model": 'a "quoted" id'},
     {"stream": True, "tenant": "t=1", "upstream_ms": 0.001, "status": 404}],
)  # fmt: skip
def test_a_line_handed_to_the_gateways_handler_reads_as_its_log_record_would(
    root_logging: None, fmt: LogFormat, changes: dict[str, object]
) -> None:
    """The INFO request line skips the LogRecord when configure_logging's handler is the only
    place it goes (emit_later): its text is the one the record would have been formatted to."""
    out = io.StringIO()
    logging.getLogger().handlers.clear()  # pytest's own capture handlers (put back after)
    configure_logging(fmt, "INFO", out, flush_interval_s=3600)
    (handler,) = logging.getLogger().handlers
    assert isinstance(handler, ConsoleHandler)
    RequestLines().request(served(**changes))
    assert handler.waiting == 1 and out.getvalue() == ""  # an entry, formatted with its chunk
    handler.flush()
    (line,) = lines_of(out)
    record = logging.LogRecord("hybrid_gateway.request", logging.INFO, "", 0, "request", None, None)
    record.request = served(**changes)
    formatter = LogfmtFormatter() if fmt == "logfmt" else JsonFormatter()
    assert _without_ts(line, fmt) == _without_ts(formatter.format(record), fmt)


def test_a_line_goes_through_a_log_record_where_something_else_would_see_it(
    root_logging: None,
) -> None:
    """Another handler, a filter on the request logger, or a record factory: the line is a
    LogRecord as before, and each of them sees it."""
    out, seen = io.StringIO(), []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    root = logging.getLogger()
    root.handlers.clear()  # pytest's own capture handlers (put back after)
    configure_logging("logfmt", "INFO", out)
    root.addHandler(Keep())
    RequestLines().request(served())
    assert len(seen) == 1 and logfmt(lines_of(out)[0])["request_id"] == "req_abc"
    root.removeHandler(root.handlers[-1])
    logger = logging.getLogger("hybrid_gateway.request")
    dropped = logging.Filter("nothing")  # refuses every record: its name matches none
    logger.addFilter(dropped)
    try:
        RequestLines().request(served())
    finally:
        logger.removeFilter(dropped)
    assert len(lines_of(out)) == 1  # the filter saw the record, and dropped it
    factory = logging.getLogRecordFactory()
    made: list[str] = []

    def counting(*args: object, **kwargs: object) -> logging.LogRecord:
        made.append("record")
        return factory(*args, **kwargs)

    logging.setLogRecordFactory(counting)
    try:
        RequestLines().request(served())
    finally:
        logging.setLogRecordFactory(factory)
    assert made == ["record"] and len(lines_of(out)) == 2


def test_an_entry_that_fails_to_render_loses_its_line_only(
    root_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    out = io.StringIO()
    logging.getLogger().handlers.clear()  # pytest's own capture handlers (put back after)
    configure_logging("logfmt", "INFO", out, flush_interval_s=3600)
    (handler,) = logging.getLogger().handlers
    lines = RequestLines()
    lines.request(served(request_id="req_1"))
    assert isinstance(handler, ConsoleHandler)
    handler.emit_later(("not", "a", "line"))
    lines.request(served(request_id="req_2"))
    handler.flush()
    assert [logfmt(line)["request_id"] for line in lines_of(out)] == ["req_1", "req_2"]
    assert "Logging error" in capsys.readouterr().err
