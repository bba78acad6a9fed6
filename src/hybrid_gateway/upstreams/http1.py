"""A lean HTTP/1.1 keep-alive client for upstream calls: asyncio protocol + llhttp parser.

Why not aiohttp's client here: profiled under load, a relayed request spent about half of the
gateway's CPU inside ``ClientSession._request`` (URL and header objects, tracing hooks, cookie
jar, timers) that a gateway talking to a few known OpenAI-compatible origins never needs.  This
client does one thing: send a prepared request on a pooled connection and hand back the status,
the headers and the body (whole, or chunk by chunk as it arrives).  ``httptools`` (llhttp, as in
uvicorn) parses responses, chunked transfer encoding included.

Failure vocabulary, mapped to gateway errors by the channel:
``ConnectFailed`` (refused, unreachable, TLS), ``ConnectionBroken`` (closed or reset before the
response was complete), ``ProtocolViolation`` (not HTTP).  Timeouts are the caller's
(``asyncio.timeout``), but for the silence between a stream's chunks, which one timer per stream
watches (``chunks``): a timeout per chunk cost more than the rest of reading it.  A pooled
connection the server had closed while it sat idle is sent
on once more, on a fresh connection, only when it failed the way such a connection fails: the
write failed, or the close came within ``STALE_CLOSE_WINDOW_S`` of the write, before any byte
(see there).  Any other failure, and any cancellation, closes the connection and is raised.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import httptools

# A keep-alive connection the server closed while it sat in the pool: a close that already
# arrived is seen before the write (``send`` lets the event loop deliver it first) and the
# connection is not used.  One still in flight fails the reuse at once: the write fails, or
# the FIN or the RST for our request arrives one round trip after the write (under a
# millisecond on a LAN, ~0.15 s across an ocean) plus whatever the event loop was busy with.
# An upstream that took the request and died while working on it (OOM, crash) closes later:
# that request may have been processed, so it is not sent again here; the error goes to the
# dispatcher, whose retry policy decides (backoff, retry budget, counted in x-gateway-retries).
STALE_CLOSE_WINDOW_S = 0.25


class Http1Error(Exception):
    pass


class ConnectFailed(Http1Error):
    pass


class ConnectionBroken(Http1Error):
    pass


class ProtocolViolation(Http1Error):
    pass


@dataclass(frozen=True, slots=True)
class Head:
    status: int
    headers: Mapping[str, str]  # names lower-cased


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection carrying one exchange at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        # The parser holds our bound callbacks, a reference cycle that ``connection_lost``
        # breaks: left to the cyclic GC, dead connections piled up between full collections.
        self._parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self._headers: dict[str, str] = {}
        self._head: Head | None = None
        self._chunks: deque[bytes] = deque()
        self._complete = False
        self._error: Http1Error | None = None
        self._received_any = False
        self._heard_at = 0.0  # loop.time() of the last bytes received (silence watch)
        self._silent = False  # the silence watch fired
        # loop.time() of the last write and of the connection's loss (stale-close detection)
        self._sent_at = 0.0
        self._lost_at: float | None = None
        self._write_failed = False
        self._waiter: asyncio.Future[None] | None = None
        self.keep_alive = False

    # -- asyncio.Protocol --------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, but have its interface.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._received_any = True
        self._heard_at = asyncio.get_running_loop().time()
        if self._parser is None:
            return  # after connection_lost: nothing can be answered on this connection now
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ProtocolViolation(f"the upstream's answer is not valid HTTP: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._lost_at = asyncio.get_running_loop().time()
        try:
            self._settle(exc)
        finally:
            self._parser = None  # see __init__: frees this connection without the cyclic GC

    def _settle(self, exc: Exception | None) -> None:
        if self._complete:
            return
        if exc is None and self._head is not None and _delimited_by_close(self._head):
            self.on_message_complete()  # a body without length or chunking ends at close
            self.keep_alive = False
            return
        reason = f"{type(exc).__name__}: {exc}" if exc else "closed by the upstream"
        self._fail(ConnectionBroken(f"connection lost before the answer was complete: {reason}"))

    # -- llhttp callbacks --------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        assert self._parser is not None  # llhttp calls back from inside feed_data
        self._head = Head(self._parser.get_status_code(), self._headers)
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(bytes(body))
        self._wake()

    def on_message_complete(self) -> None:
        self._complete = True
        self.keep_alive = self._parser is not None and self._parser.should_keep_alive()
        self._wake()

    # -- the exchange ------------------------------------------------------------------
    def send(self, request: bytes) -> None:
        self._headers, self._head, self._complete, self._error = {}, None, False, None
        self._chunks.clear()
        self._received_any = self._silent = False
        assert self.transport is not None
        self._sent_at = asyncio.get_running_loop().time()
        try:
            self.transport.write(request)
        except (OSError, RuntimeError) as exc:  # uvloop raises on a transport already closed
            self._write_failed = True
            raise ConnectionBroken(f"could not send: {type(exc).__name__}: {exc}") from None

    async def head(self) -> Head:
        while self._head is None:
            await self._wait()
        return self._head

    async def chunks(self, idle_timeout_s: float | None = None) -> AsyncIterator[bytes]:
        """The body as it arrives; ends when the message is complete.

        With ``idle_timeout_s``, a silence that long (from the call, or from the last bytes
        received) raises TimeoutError: one timer for the whole stream, re-armed only when it
        finds that bytes came meanwhile.
        """
        watch = None if idle_timeout_s is None else _SilenceWatch(self, idle_timeout_s)
        try:
            while True:
                while self._chunks:
                    yield self._chunks.popleft()
                if self._complete:
                    return
                await self._wait()
                if self._silent:
                    raise TimeoutError(f"no bytes for {idle_timeout_s:g} s")
        finally:
            if watch is not None:
                watch.cancel()

    async def read(self) -> bytes:
        """The whole body (``chunks`` without an async generator: one per answer costs)."""
        while not self._complete:
            await self._wait()
        parts, self._chunks = self._chunks, deque()
        return b"".join(parts)

    @property
    def idle_and_sound(self) -> bool:
        return self._complete and self.keep_alive and not self.closed and self._error is None

    def failed_as_stale(self, window_s: float) -> bool:
        """Did this exchange fail the way a reused connection closed while idle fails?

        Nothing was received, and the write failed or the connection was lost within
        ``window_s`` of it: the server cannot have started on the request.
        """
        if self._received_any:
            return False
        if self._write_failed:
            return True
        return self._lost_at is not None and self._lost_at - self._sent_at <= window_s

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True

    async def _wait(self) -> None:
        self._raise_error()
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
        self._raise_error()

    def _raise_error(self) -> None:
        """Raise a copy of the stored error: raising the stored one would attach a traceback
        whose frames hold this connection, another cycle left to the cyclic GC."""
        if self._error is not None:
            raise type(self._error)(*self._error.args)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, error: Http1Error) -> None:
        if self._error is None:
            self._error = error
        self._wake()


class _SilenceWatch:
    """Wakes a connection's reader with ``_silent`` set once it has heard nothing for
    ``idle_s``.  It fires at the last bytes' time + ``idle_s``, and then either ends the wait
    or, when bytes came meanwhile, re-arms for their time + ``idle_s``."""

    __slots__ = ("_conn", "_handle", "_idle_s", "_loop")

    def __init__(self, conn: _Connection, idle_s: float) -> None:
        self._conn, self._idle_s = conn, idle_s
        self._loop = asyncio.get_running_loop()
        conn._heard_at = self._loop.time()  # the silence counts from now at the latest
        self._handle = self._loop.call_at(conn._heard_at + idle_s, self._check)

    def _check(self) -> None:
        due = self._conn._heard_at + self._idle_s
        if self._loop.time() < due - _TIMER_SLACK_S:
            self._handle = self._loop.call_at(due, self._check)
        else:
            self._conn._silent = True
            self._conn._wake()

    def cancel(self) -> None:
        self._handle.cancel()


# A loop may run a timer up to its clock resolution early: the watch does not re-arm for less.
_TIMER_SLACK_S = 0.001


def _delimited_by_close(head: Head) -> bool:
    """A response whose body runs until the server closes the connection (RFC 9112 6.3)."""
    return "content-length" not in head.headers and "transfer-encoding" not in head.headers


class Http1Pool:
    """Keep-alive connections to one origin (``http://host:port`` or ``https://...``)."""

    def __init__(
        self,
        base_url: str,
        *,
        max_idle: int,
        connect_timeout_s: float,
        ca_file: str | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.base_path = parts.path.rstrip("/")
        default_port = self.port == (443 if parts.scheme == "https" else 80)
        self.host_header = parts.netloc if not default_port else self.host
        self._ssl = ssl.create_default_context(cafile=ca_file) if parts.scheme == "https" else None
        self._idle: deque[_Connection] = deque()
        self.max_idle = max_idle  # (a reload may change it: endpoint slots resized)
        self._connect_timeout_s = connect_timeout_s

    def request_bytes(
        self, path: str, headers: Mapping[str, str], body: bytes, method: str = "POST"
    ) -> bytes:
        lines = [f"{method} {self.base_path}{path} HTTP/1.1", f"Host: {self.host_header}"]
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    async def send(self, request: bytes) -> tuple[_Connection, Head]:
        """Send on a pooled (or new) connection and wait for the response head."""
        conn = self._take_idle()
        if conn is not None:
            try:
                await asyncio.sleep(0)  # deliver a close that already arrived (not yet handled)
            except BaseException:  # cancelled here: the connection is out of the pool already
                conn.close()
                raise
            if conn.closed:
                conn = self._take_idle()  # the others were checked in the same loop pass
        if conn is not None:
            try:
                conn.send(request)
                return conn, await conn.head()
            except ConnectionBroken:
                conn.close()
                if not conn.failed_as_stale(STALE_CLOSE_WINDOW_S):
                    raise  # the upstream may have worked on it: the dispatcher decides
                # The server had closed this idle connection: nothing was processed, so
                # sending once more on a fresh connection is safe.
            except BaseException:  # cancelled or timed out: the upstream must see a hang-up
                conn.close()
                raise
        conn = await self._connect()
        try:
            conn.send(request)
            return conn, await conn.head()
        except BaseException:
            conn.close()
            raise

    def release(self, conn: _Connection) -> None:
        """Return a connection whose exchange is over; broken or unfinished ones are closed."""
        if conn.idle_and_sound and len(self._idle) < self.max_idle:
            conn.reused = True
            self._idle.append(conn)
        else:
            conn.close()

    @property
    def idle_connections(self) -> int:
        """Pooled connections still open (the server may have closed some while idle)."""
        return sum(1 for conn in self._idle if not conn.closed)

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                _, conn = await loop.create_connection(
                    _Connection, self.host, self.port, ssl=self._ssl,
                    server_hostname=self.host if self._ssl else None,
                )  # fmt: skip
        except TimeoutError:
            raise ConnectFailed(f"no connection within {self._connect_timeout_s:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"{type(exc).__name__}: {exc}") from None
        return conn
