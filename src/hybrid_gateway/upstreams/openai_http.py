"""An upstream channel speaking the OpenAI chat completions API over pooled HTTP/1.1.

Connections to the channel's origin are kept alive between requests (the brief measured
200-300 ms saved at p95 by connection reuse) by the lean client in ``http1.py``.  A semaphore
bounds the requests in flight to ``max_concurrency``; a request that cannot get a slot within
``queue_timeout_s`` is refused with 503 rather than queueing without bound.  Every failure
becomes an ``UpstreamError`` that says what broke: refused or reset connections and 5xx are 502,
a timeout is 504.  A stream's connection is closed, not pooled, when its reader stops early, so
the upstream sees the disconnect and frees the request's slot.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import orjson

from hybrid_gateway import __version__
from hybrid_gateway.config import ChannelConfig
from hybrid_gateway.errors import (
    InvalidRequest,
    Overloaded,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from hybrid_gateway.upstreams.http1 import (
    ConnectFailed,
    Head,
    Http1Error,
    Http1Pool,
    _Connection,
)
from hybrid_gateway.upstreams.profiles import (
    PROFILES,
    Limits,
    Profile,
    ProfileName,
    merge_answers,
    plan_request,
    profile_from_models,
)
from hybrid_gateway.upstreams.sse import iter_data
from hybrid_gateway.upstreams.validation_errors import validation_error

# ``profile: auto`` waits at most this long for ``GET /models`` (then sends the request as is).
DETECT_TIMEOUT_S = 10.0


class UpstreamRejected(InvalidRequest):
    """The upstream said the request itself is wrong (400/413/422): the client's to fix."""

    code = "upstream_rejected_request"


class OpenAIChannel:
    def __init__(
        self,
        name: str,
        config: ChannelConfig,
        *,
        api_key: str | None,
        ca_file: str | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self._pool = Http1Pool(
            config.base_url, max_idle=config.max_concurrency,
            connect_timeout_s=config.connect_timeout_s, ca_file=ca_file,
        )  # fmt: skip
        self._headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "User-Agent": f"hybrid-gateway/{__version__}",
        }
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._api_key = api_key
        self._slots = asyncio.Semaphore(config.max_concurrency)
        self._owed = 0  # slots a reload took away, not yet taken back (``resize``)
        # None until ``auto`` is detected (upstreams/profiles.py)
        self._profile: Profile | None = PROFILES.get(config.profile)
        self._detecting = asyncio.Lock()
        self._limits = Limits(name, config.context_tokens, config.fan_out_n)

    async def aclose(self) -> None:
        self._pool.close()

    @property
    def idle_connections(self) -> int:
        return self._pool.idle_connections

    def resize(self, max_concurrency: int) -> None:
        """A reload's slot count.  More: free at once.  Fewer: taken back as requests in flight
        release theirs, or from the free ones by the next request; none in flight is cut."""
        more = max_concurrency - self.config.max_concurrency
        self.config = self.config.model_copy(update={"max_concurrency": max_concurrency})
        self._pool.max_idle = max_concurrency
        if more < 0:
            self._owed -= more
            return
        paid = min(more, self._owed)  # slots still owed from an earlier cut cancel first
        self._owed -= paid
        for _ in range(more - paid):
            self._slots.release()

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
        while self._owed and not self._slots.locked():  # (no suspension: a free slot)
            await self._slots.acquire()  # a reload cut the slots: keep this free one
            self._owed -= 1
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

    async def profile(self) -> Profile:
        """The channel's profile; ``auto`` asks ``GET /models`` once (again only after a
        transport failure, meanwhile sending requests unchanged)."""
        if self._profile is not None:
            return self._profile
        async with self._detecting:
            if self._profile is None:
                detected = await self._detect()
                if detected is None:
                    return PROFILES[ProfileName.OPENAI]
                self._profile = PROFILES[detected]
        return self._profile

    async def _detect(self) -> ProfileName | None:
        headers = {k: v for k, v in self._headers.items() if k != "Content-Type"}
        request = self._pool.request_bytes("/models", headers, b"", method="GET")
        try:
            async with asyncio.timeout(min(self.config.timeout_s, DETECT_TIMEOUT_S)):
                conn, head = await self._pool.send(request)
                try:
                    raw = await conn.read()
                finally:
                    self._pool.release(conn)
        except (TimeoutError, Http1Error):
            return None
        return profile_from_models(raw if head.status < 400 else b"", head.headers)

    async def complete(self, body: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]]:
        """POST a non-streamed request; return the raw answer and its parsed JSON.

        A profile without native ``n`` answers ``n > 1`` with ``n`` calls at once, merged."""
        plan = plan_request(await self.profile(), body, self._limits, stream=False)
        if plan.fan_out == 1:
            return await self._complete_one(plan.body)
        try:
            async with asyncio.TaskGroup() as group:
                calls = [group.create_task(self._complete_one(plan.body_for(i)))
                         for i in range(plan.fan_out)]  # fmt: skip
        except ExceptionGroup as failed:  # the first failure, the others cancelled
            raise failed.exceptions[0] from None
        merged = merge_answers([call.result()[1] for call in calls])
        return orjson.dumps(merged), merged

    async def _complete_one(self, body: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]]:
        request = self._request(self.payload(body, stream=False))
        await self._acquire()
        conn: _Connection | None = None
        try:
            async with asyncio.timeout(self.config.timeout_s):
                conn, head = await self._pool.send(request)
                raw = await conn.read()
        except TimeoutError:
            raise UpstreamTimeout(
                f"channel {self.name} gave no answer within {self.config.timeout_s:g} s",
                channel=self.name,
            ) from None
        except Http1Error as exc:
            raise self._transport_error(exc) from None
        finally:
            if conn is not None:
                self._pool.release(conn)
            self._release()
        if head.status >= 400:
            raise self._status_error(head, raw)
        return raw, self._parse(raw)

    @asynccontextmanager
    async def open_stream(self, body: Mapping[str, Any]) -> AsyncIterator[AsyncIterator[bytes]]:
        """Open a streamed request; yields an iterator of upstream SSE data payloads.

        Failures while opening (connect, status) raise before anything is yielded, so the
        caller can still answer with a plain HTTP error.  A break while iterating raises
        ``UpstreamUnavailable`` (or ``UpstreamTimeout`` after ``timeout_s`` of silence) from
        the iterator.
        """
        plan = plan_request(await self.profile(), body, self._limits, stream=True)
        request = self._request(self.payload(plan.body, stream=True))
        await self._acquire()
        conn: _Connection | None = None
        try:
            try:
                async with asyncio.timeout(self.config.timeout_s):
                    conn, head = await self._pool.send(request)
                    raw = await conn.read() if head.status >= 400 else b""
            except TimeoutError:
                raise UpstreamTimeout(
                    f"channel {self.name} did not start its stream within "
                    f"{self.config.timeout_s:g} s",
                    channel=self.name,
                ) from None
            except Http1Error as exc:
                raise self._transport_error(exc) from None
            if head.status >= 400:
                raise self._status_error(head, raw)
            yield self._events(conn)
        finally:
            if conn is not None:
                self._pool.release(conn)  # an unfinished stream is closed, never pooled
            self._release()

    def _release(self) -> None:
        if self._owed:  # a reload cut the slots: this one is not given back
            self._owed -= 1
        else:
            self._slots.release()

    def _request(self, payload: bytes) -> bytes:
        return self._pool.request_bytes("/chat/completions", self._headers, payload)

    async def _events(self, conn: _Connection) -> AsyncIterator[bytes]:
        try:
            async for payload in iter_data(conn.chunks(idle_timeout_s=self.config.timeout_s)):
                yield payload
        except TimeoutError:
            raise UpstreamTimeout(
                f"channel {self.name} stalled mid-stream for {self.config.timeout_s:g} s",
                channel=self.name,
            ) from None
        except Http1Error as exc:
            raise UpstreamUnavailable(
                f"channel {self.name} broke the stream: {exc}",
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

    def _transport_error(self, exc: Http1Error) -> UpstreamError:
        what = "could not be reached" if isinstance(exc, ConnectFailed) else "failed"
        return UpstreamUnavailable(
            f"channel {self.name} {what}: {exc}",
            channel=self.name,
            code="upstream_connection_error",
        )

    def _status_error(self, head: Head, raw: bytes) -> InvalidRequest | UpstreamError | Overloaded:
        status, headers = head.status, head.headers
        detail = _scrub(_error_message(raw), self._api_key)
        if status in (400, 413, 422) or (status == 500 and validation_error(raw)):
            # a 500 shaped like a validation error (llama.cpp's): the request's fault, a 400
            return UpstreamRejected(f"channel {self.name} rejected the request: {detail}")
        if status == 429:
            retry_after = _retry_after(headers.get("retry-after"))
            return Overloaded(
                f"channel {self.name} is rate limited (429): {detail}",
                retry_after_s=retry_after,
                code="upstream_rate_limited",
            )
        code = "upstream_auth_failed" if status in (401, 403) else f"upstream_status_{status}"
        return UpstreamUnavailable(
            f"channel {self.name} answered HTTP {status}: {detail}", channel=self.name, code=code
        )


# A bearer token or an OpenAI-style secret key in an upstream's error text ("invalid token:
# Bearer sk-live-...", echoed by some proxies and self-hosted servers): 8+ token characters
# with a digit, so "Bearer authentication is required" stays readable
_TOKEN = r"(?=[A-Za-z0-9._~+/=-]*\d)[A-Za-z0-9._~+/=-]{8,}"
_SECRET = re.compile(rf"(?i)(\bbearer\s+){_TOKEN}|\bsk-[A-Za-z0-9_-]{{8,}}")
_MIN_KEY = 8  # a shorter configured key (a placeholder such as "x") would mask ordinary text


def _scrub(detail: str, api_key: str | None) -> str:
    """The upstream's error text as the client may see it: the channel's credentials masked."""
    if api_key and len(api_key) >= _MIN_KEY:
        detail = detail.replace(api_key, "[redacted]")
    return _SECRET.sub(lambda m: f"{m.group(1) or ''}[redacted]", detail)


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
