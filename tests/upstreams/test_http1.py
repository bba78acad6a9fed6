"""The lean upstream HTTP/1.1 client against scripted servers on loopback."""

from __future__ import annotations

import asyncio
import gc
import ssl
import subprocess
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import pytest

from hybrid_gateway.upstreams import http1
from hybrid_gateway.upstreams.http1 import (
    ConnectFailed,
    ConnectionBroken,
    Http1Pool,
    ProtocolViolation,
)
from tests.e2e.stack import closed_port


class Reader:
    """The server side's reader, keeping every request head it reads."""

    def __init__(self, reader: asyncio.StreamReader, seen: list[bytes]) -> None:
        self._reader = reader
        self._seen = seen

    async def request(self) -> bytes:
        head = await self._reader.readuntil(b"\r\n\r\n")
        self._seen.append(head)
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        return head + await self._reader.readexactly(length)

    async def hung_up(self) -> bool:
        """Wait for the client's next move: True when it closed the connection."""
        return await self._reader.read(1) == b""


Script = Callable[[Reader, asyncio.StreamWriter, int], Awaitable[None]]


@asynccontextmanager
async def server(
    script: Script, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[tuple[int, list[bytes]]]:
    """A server that runs ``script`` per connection; yields (port, request heads seen)."""
    seen: list[bytes] = []
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            await script(Reader(reader, seen), writer, connections)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ssl_context)
    port = srv.sockets[0].getsockname()[1]
    async with srv:
        yield port, seen


def pool(port: int, scheme: str = "http", ca_file: str | None = None) -> Http1Pool:
    url = f"{scheme}://127.0.0.1:{port}/v1"
    return Http1Pool(url, max_idle=4, connect_timeout_s=2, ca_file=ca_file)


def request(p: Http1Pool, body: bytes = b'{"x": 1}') -> bytes:
    return p.request_bytes("/chat/completions", {"Content-Type": "application/json"}, body)


async def keep_alive_json(reader: Reader, writer: asyncio.StreamWriter, n: int) -> None:
    while True:
        await reader.request()
        body = b'{"ok": %d}' % n
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
        await writer.drain()


async def test_request_line_headers_and_keep_alive_reuse() -> None:
    async with server(keep_alive_json) as (port, seen):
        p = pool(port)
        for _ in range(3):
            conn, head = await p.send(request(p))
            assert head.status == 200 and head.headers["content-type"] == "application/json"
            assert await conn.read() == b'{"ok": 1}'  # always connection 1: reused
            p.release(conn)
        p.close()
    assert seen[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{port}\r\n".encode() in seen[0]
    assert b"Content-Length: 8\r\n" in seen[0]


async def test_chunked_body_arrives_chunk_by_chunk() -> None:
    release = asyncio.Event()

    async def chunked(reader: Reader, writer: asyncio.StreamWriter, n: int) -> None:
        await reader.request()
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await writer.drain()
        await release.wait()
        writer.write(b"6\r\n world\r\n0\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    async with server(chunked) as (port, _):
        p = pool(port)
        conn, _ = await p.send(request(p))
        chunks = conn.chunks()
        assert await anext(chunks) == b"hello"  # before the server sent the rest
        release.set()
        assert [c async for c in chunks] == [b" world"]
        p.release(conn)
        assert len(p._idle) == 1
        p.close()


async def test_idle_connection_closed_by_the_server_is_replaced() -> None:
    async def one_then_close(reader: Reader, writer: asyncio.StreamWriter, n: int) -> None:
        await reader.request()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n%d" % n + b"!")
        await writer.drain()
        # keep-alive was promised, but the server drops the idle connection

    async with server(one_then_close) as (port, _):
        p = pool(port)
        conn, _ = await p.send(request(p))
        assert await conn.read() == b"1!"
        p.release(conn)
        await asyncio.sleep(0.05)
        conn, _ = await p.send(request(p))
        assert await conn.read() == b"2!"
        p.close()


async def test_connection_close_and_close_delimited_bodies() -> None:
    async def until_close(reader: Reader, writer: asyncio.StreamWriter, n: int) -> None:
        await reader.request()
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it")
        await writer.drain()

    async with server(until_close) as (port, _):
        p = pool(port)
        conn, _ = await p.send(request(p))
        assert await conn.read() == b"all of it"
        p.release(conn)
        assert not p._idle  # not reusable
        p.close()


async def test_reset_mid_body_is_connection_broken() -> None:
    async def cut(reader: Reader, writer: asyncio.StreamWriter, n: int) -> None:
        await reader.request()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
        await writer.drain()
        writer.transport.abort()

    async with server(cut) as (port, _):
        p = pool(port)
        conn, _ = await p.send(request(p))
        with pytest.raises(ConnectionBroken):
            await conn.read()
        p.release(conn)
        assert not p._idle
        p.close()


async def test_silence_then_close_before_any_byte_is_connection_broken() -> None:
    async def hang_up(reader: Reader, writer: asyncio.StreamWriter, n: int) -> None:
        await reader.request()
        writer.transport.abort()

    async with server(hang_up) as (port, _):
        p = pool(port)
        with pytest.raises(ConnectionBroken):
            await p.send(request(p))
        p.close()


async def test_not_http_is_a_protocol_violation() -> None:
    async def garbage(reader: Reader, writer: asyncio.StreamWriter, n: int) -> None:
        await reader.request()
        writer.write(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    async with server(garbage) as (port, _):
        p = pool(port)
        with pytest.raises(ProtocolViolation):
            await p.send(request(p))
        p.close()


async def test_refused_connection() -> None:
    p = pool(closed_port())
    with pytest.raises(ConnectFailed):
        await p.send(request(p))


async def test_idle_timeout_between_chunks() -> None:
    async def stall(reader: Reader, writer: asyncio.StreamWriter, n: int) -> None:
        await reader.request()
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
        await writer.drain()
        await asyncio.sleep(5)

    async with server(stall) as (port, _):
        p = pool(port)
        conn, _ = await p.send(request(p))
        chunks = conn.chunks(idle_timeout_s=0.1)
        assert await anext(chunks) == b"a"
        with pytest.raises(TimeoutError):
            await anext(chunks)
        p.release(conn)
        p.close()


async def test_chunks_that_keep_coming_outlast_the_idle_timeout() -> None:
    # One silence watch for the stream: it re-arms while bytes keep arriving, so a stream
    # longer than the idle timeout, with short gaps, is read whole.
    async def trickle(reader: Reader, writer: asyncio.StreamWriter, n: int) -> None:
        await reader.request()
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(12):
            writer.write(b"1\r\na\r\n")
            await writer.drain()
            await asyncio.sleep(0.05)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with server(trickle) as (port, _):
        p = pool(port)
        conn, _ = await p.send(request(p))
        body = b"".join([chunk async for chunk in conn.chunks(idle_timeout_s=0.4)])
        assert body == b"a" * 12  # 0.6 s of stream against a 0.4 s idle timeout
        p.release(conn)
        p.close()


def make_ca(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, made with the openssl command."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


async def test_https_with_a_private_ca(tmp_path: Path) -> None:
    cert, key = make_ca(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    async with server(keep_alive_json, server_ctx) as (port, _):
        trusted = pool(port, "https", ca_file=str(cert))
        conn, head = await trusted.send(request(trusted))
        assert head.status == 200 and await conn.read() == b'{"ok": 1}'
        trusted.release(conn)
        trusted.close()
        untrusted = pool(port, "https")
        with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
            await untrusted.send(request(untrusted))


async def _drop_the_second(reader: Reader, writer: asyncio.StreamWriter, n: int) -> None:
    if n == 1:
        await reader.request()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
        await writer.drain()
        await reader.request()  # takes the second request on the reused connection...
        writer.transport.abort()  # ...and drops it without a byte
        return
    await keep_alive_json(reader, writer, n)


async def test_reused_connection_dropped_before_answering_is_retried_once_fresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Within the window, as an idle-close race is (a wide window: no timing in this test).
    monkeypatch.setattr(http1, "STALE_CLOSE_WINDOW_S", 60.0)
    async with server(_drop_the_second) as (port, seen):
        p = pool(port)
        conn, _ = await p.send(request(p))
        assert await conn.read() == b"first"
        p.release(conn)
        conn, _ = await p.send(request(p))
        assert await conn.read() == b'{"ok": 2}'
        p.release(conn)
        p.close()
    assert len([s for s in seen if s.startswith(b"POST")]) == 3


async def test_reused_connection_dropped_late_is_not_sent_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Past the window, as an upstream that took the request and died working on it (no
    # timing in this test: a negative window puts every drop past it).  It may have processed
    # the request: the dispatcher's retry policy decides, not the pool.
    monkeypatch.setattr(http1, "STALE_CLOSE_WINDOW_S", -1.0)
    async with server(_drop_the_second) as (port, seen):
        p = pool(port)
        conn, _ = await p.send(request(p))
        assert await conn.read() == b"first"
        p.release(conn)
        with pytest.raises(ConnectionBroken):
            await p.send(request(p))
        p.close()
    assert len([s for s in seen if s.startswith(b"POST")]) == 2


async def test_cancelled_while_awaiting_the_head_on_a_reused_connection_hangs_up() -> None:
    # asyncio.timeout in the channel cancels just like this: the upstream must see the
    # disconnect (and stop generating), not a socket left open with nobody to close it.
    second_sent, hung_up = asyncio.Event(), asyncio.Event()

    async def hold_the_second(reader: Reader, writer: asyncio.StreamWriter, n: int) -> None:
        await reader.request()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
        await writer.drain()
        await reader.request()
        second_sent.set()
        if await reader.hung_up():
            hung_up.set()

    async with server(hold_the_second) as (port, _):
        p = pool(port)
        conn, _ = await p.send(request(p))
        assert await conn.read() == b"first"
        p.release(conn)
        pending = asyncio.ensure_future(p.send(request(p)))  # reuses the pooled connection
        await second_sent.wait()
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        await asyncio.wait_for(hung_up.wait(), 10)  # a guard against hanging, not a timing
        p.close()


async def test_cancelled_before_reusing_a_pooled_connection_hangs_up() -> None:
    # the pool yields once before it writes on an idle connection (to see a close that already
    # arrived); a cancellation at that point must not strand the connection it took
    hung_up = asyncio.Event()

    async def one_then_wait(reader: Reader, writer: asyncio.StreamWriter, n: int) -> None:
        await reader.request()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
        await writer.drain()
        if await reader.hung_up():
            hung_up.set()

    async with server(one_then_wait) as (port, _):
        p = pool(port)
        conn, _ = await p.send(request(p))
        assert await conn.read() == b"first"
        p.release(conn)
        pending = asyncio.ensure_future(p.send(request(p)))
        await asyncio.sleep(0)  # it has taken the pooled connection and yielded once
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        assert p.idle_connections == 0
        await asyncio.wait_for(hung_up.wait(), 10)  # a guard against hanging, not a timing
        p.close()


async def _cut_mid_body(reader: Reader, writer: asyncio.StreamWriter, n: int) -> None:
    await reader.request()
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
    await writer.drain()
    writer.transport.abort()


@pytest.mark.parametrize("script", [keep_alive_json, _cut_mid_body], ids=["pooled", "reset"])
async def test_a_finished_connection_is_freed_without_the_cyclic_gc(script: Script) -> None:
    # A connection in a reference cycle (its parser holding its callbacks, a raised error's
    # traceback holding its frames) waits for a full collection: under churn thousands of dead
    # connections piled up between two.  Freed by reference counting, none do.
    async with server(script) as (port, _):
        p = pool(port)
        gc.disable()
        try:
            conn, _ = await p.send(request(p))
            with suppress(ConnectionBroken):  # "reset": raised from the stored error
                await conn.read()
            p.release(conn)
            p.close()
            gone = weakref.ref(conn)
            del conn
            for _ in range(20):  # connection_lost comes a few loop iterations after close
                if gone() is None:
                    break
                await asyncio.sleep(0)
            assert gone() is None
        finally:
            gc.enable()
