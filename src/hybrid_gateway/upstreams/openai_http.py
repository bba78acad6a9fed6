"""An upstream channel speaking the OpenAI chat completions API over pooled HTTP.

One ``aiohttp.ClientSession`` per channel keeps connections alive between requests (the brief
measured 200-300 ms saved at p95 by connection reuse).  A semaphore bounds the requests in flight
to ``max_concurrency``; a request that cannot get a slot within ``queue_timeout_s`` is refused
with 503 rather than queueing without bound.  Every failure becomes an ``UpstreamError`` that
says what broke: refused or reset connections and 5xx are 502, a timeout is 504.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson

from hybrid_gateway.config import ChannelConfig
from hybrid_gateway.errors import (
    InvalidRequest,
    Overloaded,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from hybrid_gateway.upstreams.sse import iter_data


class UpstreamRejected(InvalidRequest):
    """The upstream said the request itself is wrong (400/413/422): the client's to fix."""

    code = "upstream_rejected_request"


class OpenAIChannel:
    def __init__(self, name: str, config: ChannelConfig, *, api_key: str | None) -> None:
        self.name = name
        self.config = config
        self._url = config.base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._slots = asyncio.Semaphore(config.max_concurrency)
        self._session: aiohttp.ClientSession | None = None
        self._timeout = aiohttp.ClientTimeout(
            total=config.timeout_s, sock_connect=config.connect_timeout_s
        )
        # A stream may run long; what must not happen is a silent gap of timeout_s.
        self._stream_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=config.connect_timeout_s, sock_read=config.timeout_s
        )

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self.config.max_concurrency, keepalive_timeout=60, ttl_dns_cache=300
            )
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=True)
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def payload(self, body: Mapping[str, Any], *, stream: bool) -> bytes:
        """The body to send upstream: the client's, with this channel's model name."""
        out = dict(body)
        out["model"] = self.config.model
        if stream:
            # Always ask for usage so the gateway can bill the stream; it is dropped again for
            # clients that did not ask for it.
            out["stream_options"] = {"include_usage": True}
        return orjson.dumps(out)

    async def _acquire(self) -> None:
        """Take one of ``max_concurrency`` slots, or refuse after ``queue_timeout_s``."""
        if not self._slots.locked():
            await self._slots.acquire()  # a free slot: no timer needed
            return
        try:
            await asyncio.wait_for(self._slots.acquire(), self.config.queue_timeout_s)
        except TimeoutError:
            raise Overloaded(
                f"channel {self.name} is at its concurrency limit "
                f"({self.config.max_concurrency}); retry later",
                retry_after_s=1.0,
            ) from None

    async def complete(self, body: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]]:
        """POST a non-streamed request; return the raw answer and its parsed JSON."""
        data = self.payload(body, stream=False)
        await self._acquire()
        try:
            async with self._client().post(
                self._url, data=data, headers=self._headers, timeout=self._timeout
            ) as resp:
                raw = await resp.read()
                if resp.status >= 400:
                    raise self._status_error(resp.status, raw, resp.headers)
        except (TimeoutError, aiohttp.ServerTimeoutError):
            raise UpstreamTimeout(
                f"channel {self.name} gave no answer within {self.config.timeout_s:g} s",
                channel=self.name,
            ) from None
        except aiohttp.ClientError as exc:
            raise self._connection_error(exc) from None
        finally:
            self._slots.release()
        return raw, self._parse(raw)

    @asynccontextmanager
    async def open_stream(self, body: Mapping[str, Any]) -> AsyncIterator[AsyncIterator[bytes]]:
        """Open a streamed request; yields an iterator of upstream SSE data payloads.

        Failures while opening (connect, status) raise before anything is yielded, so the
        caller can still answer with a plain HTTP error.  A break while iterating raises
        ``UpstreamUnavailable`` from the iterator.
        """
        data = self.payload(body, stream=True)
        await self._acquire()
        try:
            try:
                resp = await self._client().post(
                    self._url, data=data, headers=self._headers, timeout=self._stream_timeout
                )
            except (TimeoutError, aiohttp.ServerTimeoutError):
                raise UpstreamTimeout(
                    f"channel {self.name} did not start its stream within "
                    f"{self.config.timeout_s:g} s",
                    channel=self.name,
                ) from None
            except aiohttp.ClientError as exc:
                raise self._connection_error(exc) from None
            try:
                if resp.status >= 400:
                    raise self._status_error(resp.status, await resp.read(), resp.headers)
                yield self._events(resp)
            finally:
                resp.release()
        finally:
            self._slots.release()

    async def _events(self, resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
        try:
            async for payload in iter_data(resp.content):
                yield payload
        except (TimeoutError, aiohttp.ServerTimeoutError):
            raise UpstreamTimeout(
                f"channel {self.name} stalled mid-stream for {self.config.timeout_s:g} s",
                channel=self.name,
            ) from None
        except aiohttp.ClientError as exc:
            raise UpstreamUnavailable(
                f"channel {self.name} broke the stream: {type(exc).__name__}",
                channel=self.name,
                code="upstream_stream_broken",
            ) from None

    def _parse(self, raw: bytes) -> dict[str, Any]:
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict) or not isinstance(parsed.get("choices"), list):
            raise UpstreamUnavailable(
                f"channel {self.name} answered with something that is not a chat completion",
                channel=self.name,
                code="upstream_bad_response",
            )
        return parsed

    def _connection_error(self, exc: aiohttp.ClientError) -> UpstreamError:
        return UpstreamUnavailable(
            f"channel {self.name} could not be reached: {type(exc).__name__}: {exc}",
            channel=self.name,
            code="upstream_connection_error",
        )

    def _status_error(
        self, status: int, raw: bytes, headers: Mapping[str, str]
    ) -> InvalidRequest | UpstreamError | Overloaded:
        detail = _error_message(raw)
        if status in (400, 413, 422):
            return UpstreamRejected(f"channel {self.name} rejected the request: {detail}")
        if status == 429:
            retry_after = _retry_after(headers.get("Retry-After"))
            return Overloaded(
                f"channel {self.name} is rate limited (429): {detail}", retry_after_s=retry_after
            )
        code = "upstream_auth_failed" if status in (401, 403) else f"upstream_status_{status}"
        return UpstreamUnavailable(
            f"channel {self.name} answered HTTP {status}: {detail}", channel=self.name, code=code
        )


def _error_message(raw: bytes) -> str:
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw[:200].decode("utf-8", "replace") or "(empty body)"
    if isinstance(parsed, dict):
        error = parsed.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])[:500]
        if isinstance(error, str):
            return error[:500]
    return raw[:200].decode("utf-8", "replace")


def _retry_after(value: str | None) -> float:
    try:
        return max(0.0, float(value)) if value else 1.0
    except ValueError:
        return 1.0
