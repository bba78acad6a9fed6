"""One request of the load generator: send a workload item, read the whole answer, record it.

What is recorded comes from the response the way a user would see it: the status, the gateway's
decision headers (``x-gateway-route``, ``x-gateway-cache``, ``x-gateway-cost-usd`` or, for a
stream, the closing ``: x-gateway-cost-usd=`` comment), the error code of an error body or event,
and the quality mark at the start of the answer text.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import aiohttp
import orjson

from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.workload.schema import WorkloadItem, parse_mark, request_body

_COST_COMMENT = b": x-gateway-cost-usd="


@dataclass(slots=True)
class Answer:
    """What one response told us, filled in as it is read."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    text: str = ""
    error_code: str | None = None
    cost_usd: float | None = None
    ttft_ms: float | None = None


def parse_route(header: str | None) -> tuple[str | None, str | None, str | None]:
    """``lane=..; channel=..; rule=..`` -> (lane, channel, rule); missing parts are None."""
    fields: dict[str, str] = {}
    for part in (header or "").split(";"):
        key, sep, value = part.strip().partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    return fields.get("lane"), fields.get("channel"), fields.get("rule")


def parse_cost(value: str | None) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:  # "pending": a stream's cost comes at its end
        return None


def _error_code(raw: bytes) -> str | None:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None
    code = error.get("code") or error.get("type")
    return str(code) if code is not None else None


def _message_text(raw: bytes) -> str:
    try:
        body = orjson.loads(raw)
        content = body["choices"][0]["message"]["content"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


class Client:
    """Sends one workload item and turns its response into a ``RequestResult``."""

    def __init__(
        self, session: aiohttp.ClientSession, base_url: str, model: str, timeout_s: float
    ) -> None:
        self._session = session
        self._model = model
        self._timeout_s = timeout_s
        self._url = base_url.rstrip("/") + "/chat/completions"

    async def send(self, item: WorkloadItem, stage_start: float) -> RequestResult:
        body = orjson.dumps(request_body(item, self._model))
        sent = time.perf_counter()
        answer = Answer()
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._exchange(body, item.stream, sent, answer)
        except TimeoutError:
            answer.error_code = "client_timeout"
        except (aiohttp.ClientError, OSError):
            answer.error_code = "connection_error"
        latency_ms = (time.perf_counter() - sent) * 1000.0
        return _result(item, sent - stage_start, latency_ms, answer)

    async def _exchange(self, body: bytes, stream: bool, sent: float, answer: Answer) -> None:
        headers = {"Content-Type": "application/json"}
        async with self._session.post(self._url, data=body, headers=headers) as response:
            answer.status = response.status
            answer.headers = {k.lower(): v for k, v in response.headers.items()}
            answer.cost_usd = parse_cost(answer.headers.get("x-gateway-cost-usd"))
            if response.status != 200:
                answer.error_code = _error_code(await response.read())
            elif stream and response.content_type == "text/event-stream":
                await _read_stream(response, sent, answer)
            else:
                answer.text = _message_text(await response.read())


async def _read_stream(response: aiohttp.ClientResponse, sent: float, answer: Answer) -> None:
    """Concatenate the content deltas; note the first one's time, the cost and any error."""
    parts: list[str] = []
    done = False
    async for line in response.content:
        line = line.rstrip(b"\r\n")
        if line.startswith(_COST_COMMENT):
            answer.cost_usd = parse_cost(line[len(_COST_COMMENT) :].decode().strip())
        elif not line.startswith(b"data:"):
            continue
        elif (payload := line[5:].strip()) == b"[DONE]":
            done = True
        elif piece := _delta(payload, answer):
            if answer.ttft_ms is None:
                answer.ttft_ms = (time.perf_counter() - sent) * 1000.0
            parts.append(piece)
    answer.text = "".join(parts)
    if not done and answer.error_code is None:
        answer.error_code = "incomplete_stream"


def _delta(payload: bytes, answer: Answer) -> str:
    try:
        chunk = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(chunk, dict):
        return ""
    if isinstance(chunk.get("error"), dict):
        answer.error_code = _error_code(payload) or "stream_error"
        return ""
    try:
        content = chunk["choices"][0]["delta"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        return ""
    return content if isinstance(content, str) else ""


def _result(item: WorkloadItem, start_s: float, latency_ms: float, answer: Answer) -> RequestResult:
    lane, channel, rule = parse_route(answer.headers.get("x-gateway-route"))
    mark = parse_mark(answer.text)
    return RequestResult(
        item=item.id,
        start_s=round(start_s, 6),
        latency_ms=round(latency_ms, 3),
        ttft_ms=None if answer.ttft_ms is None else round(answer.ttft_ms, 3),
        status=answer.status,
        error_code=answer.error_code,
        stream=item.stream,
        lane=lane,
        channel=channel,
        rule=rule,
        cache=answer.headers.get("x-gateway-cache"),
        cost_usd=answer.cost_usd,
        mark_group=None if mark is None else mark[0],
        mark_ok=None if mark is None else mark[1],
        fallback=answer.headers.get("x-gateway-fallback"),
        request_id=answer.headers.get("x-request-id"),
    )
