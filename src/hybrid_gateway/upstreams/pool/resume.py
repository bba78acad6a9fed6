"""A pool's stream that broke mid-way, continued from another endpoint (``resume_streams``).

When an endpoint dies while it streams an answer, the client has part of it already; a retry
cannot start the answer again.  But a server answering a prompt the same way each time
(greedy decoding, or a seed) gives the same answer from another replica, so the pool sends the
request again elsewhere and continues the client's stream where it stopped:

- ``Delivered`` watches what the client was sent: choice 0's text and the first chunk's
  ``id`` / ``created``.  Anything a resend could not be checked against (another choice, tool
  calls, logprobs, a finished choice) makes the stream not resumable.
- ``CatchUp`` reads the resent stream: while it repeats the delivered text it is swallowed,
  checked character for character; the chunk that goes past it is forwarded with only the new
  text; later chunks pass with the first stream's ``id`` and ``created``.  A resend that says
  anything else (``Diverged``) is given up, and the client sees the original break, as it
  would have without resuming.

``should_resume`` says whether the channel's setting allows it for a request: ``always``;
``deterministic`` (the default) when the request asked ``temperature: 0`` or a ``seed``;
``off``.  ``n`` > 1 is never resumed.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, Literal

import orjson

from hybrid_gateway.errors import GatewayError
from hybrid_gateway.upstreams.answers import empty_value
from hybrid_gateway.upstreams.pool.endpoint import Endpoint, Request
from hybrid_gateway.upstreams.sse import DONE

if TYPE_CHECKING:
    from hybrid_gateway.upstreams.pool.pool import EndpointPool

__all__ = ["CatchUp", "Delivered", "Diverged", "ResumeMode", "WatchedStream", "should_resume"]

_log = logging.getLogger(__name__)

ResumeMode = Literal["off", "deterministic", "always"]

_META = ("id", "created")
_DELTA_KEYS = frozenset({"role", "content"})


class Diverged(Exception):
    """The resent stream does not repeat what the client was already sent."""


def should_resume(mode: ResumeMode, body: Mapping[str, Any]) -> bool:
    if mode == "off" or body.get("n") not in (None, 1):
        return False
    if mode == "always":
        return True
    return body.get("temperature") == 0 or body.get("seed") is not None


class Delivered:
    """What the client was sent of a stream, as far as a resend can be checked against it."""

    __slots__ = ("meta", "ok", "parts")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.meta: dict[str, Any] | None = None
        self.ok = True

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def see(self, payload: bytes) -> None:
        if not self.ok:
            return
        chunk = _chunk(payload)
        if chunk is None:
            self.ok = False  # [DONE], or something no resend could be matched with
            return
        if self.meta is None:
            self.meta = {k: chunk[k] for k in _META if k in chunk}
        choices = chunk.get("choices")
        if choices is None:
            return
        if not isinstance(choices, list):
            self.ok = False
            return
        for choice in choices:
            content = _content(choice)
            if content is None or choice.get("finish_reason") is not None:
                self.ok = False  # not choice 0's plain text, or the answer is complete
                return
            if content:
                self.parts.append(content)


class CatchUp:
    """The resent stream's payloads, each turned into what the client should get next (None:
    nothing yet, the resend is still repeating what was delivered)."""

    __slots__ = ("_meta", "_seen", "_text", "caught")

    def __init__(self, delivered: Delivered) -> None:
        self._text = delivered.text
        self._meta = delivered.meta or {}
        self._seen = 0  # characters of the delivered text the resend has repeated
        self.caught = False

    def feed(self, payload: bytes) -> bytes | None:
        chunk = _chunk(payload)
        if chunk is None:
            if self.caught and payload.strip() == DONE:
                return payload
            raise Diverged("the resent stream ended or sent something else before catching up")
        if not self.caught and not self._catch_up(chunk):
            return None
        chunk.update(self._meta)
        return orjson.dumps(chunk)

    def _catch_up(self, chunk: dict[str, Any]) -> bool:
        """Check ``chunk`` against the delivered text; True when it is the first to go past it
        (then ``chunk`` is cut to its new part)."""
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return False  # (a usage chunk comes after the end: the check below fails first)
        if len(choices) != 1:
            raise Diverged("the resent stream has another choice")
        choice = choices[0]
        content = _content(choice)
        if content is None:
            raise Diverged("the resent stream sends something other than text")
        left = len(self._text) - self._seen
        if len(content) <= left:
            if self._text[self._seen : self._seen + len(content)] != content:
                raise Diverged(f"the resent answer differs after {self._seen} characters")
            self._seen += len(content)
            if choice.get("finish_reason") is None:
                return False
            if self._seen < len(self._text):
                raise Diverged(f"the resent answer ends after {self._seen} characters")
        elif content[:left] != self._text[self._seen :]:
            raise Diverged(f"the resent answer differs after {self._seen} characters")
        choice["delta"] = {"content": content[left:]} if len(content) > left else {}
        self.caught = True
        return True


class WatchedStream:
    """A stream's payloads; a break or stall mid-stream counts against its endpoint, and is
    continued from another endpoint when the request is resumable (``resume.py``)."""

    __slots__ = ("_body", "_broke_on", "_broken", "_catch", "_delivered", "_endpoint", "_failed",
                 "_payloads", "_pool", "_request", "stack")  # fmt: skip

    def __init__(
        self, payloads: AsyncIterator[bytes], pool: EndpointPool, endpoint: Endpoint,
        stack: AsyncExitStack,
    ) -> None:  # fmt: skip
        self._payloads, self._pool, self._endpoint, self.stack = payloads, pool, endpoint, stack
        self._delivered: Delivered | None = None
        self._catch: CatchUp | None = None
        self._body: Mapping[str, Any] = {}
        self._request: Request | None = None
        self._failed: set[str] = set()
        self._broken: GatewayError | None = None
        self._broke_on: Endpoint | None = None

    def resumable(self, body: Mapping[str, Any], request: Request, failed: set[str]) -> None:
        self._body, self._request, self._failed = body, request, failed
        self._delivered = Delivered()

    def __aiter__(self) -> WatchedStream:
        return self

    async def __anext__(self) -> bytes:
        while True:
            try:
                payload = await anext(self._payloads)
            except GatewayError as exc:
                self._pool.stream_broke(self._endpoint)
                if not await self._reopen():
                    raise
                self._broken = exc
                continue
            except StopAsyncIteration:
                if self._catch is not None and not self._catch.caught:
                    raise self._give_up("the resent stream ended before catching up") from None
                raise
            catch = self._catch
            if catch is not None:
                caught = catch.caught
                try:
                    out = catch.feed(payload)
                except Diverged as diverged:
                    raise self._give_up(str(diverged)) from None
                if out is None:
                    continue
                if not caught and self._broke_on is not None:  # the resend just caught up
                    self._pool.resume_outcome(self._broke_on, "resumed")
                payload = out
            if self._delivered is not None:
                self._delivered.see(payload)
            return payload

    async def _reopen(self) -> bool:
        """The request again on another endpoint, to be caught up with what was delivered."""
        delivered, request = self._delivered, self._request
        if delivered is None or not delivered.ok or request is None:
            return False
        await self.stack.aclose()  # (the dead endpoint's slot and connection go first)
        chars = len(delivered.text)
        opened = await self._pool.resume_stream(
            self._body, request, self._failed, self._endpoint, chars
        )
        if opened is None:
            return False
        self._broke_on = self._endpoint
        self.stack, self._endpoint, self._payloads = opened
        self._catch = CatchUp(delivered)
        return True

    def _give_up(self, why: str) -> GatewayError:
        """The resend is no continuation: the client gets the original break."""
        _log.warning("channel %s: the stream resent to endpoint %s was given up: %s",
                     self._pool.name, self._endpoint.name, why)  # fmt: skip
        assert self._broken is not None and self._broke_on is not None
        self._pool.resume_outcome(self._broke_on, "given_up")
        return self._broken


def _chunk(payload: bytes) -> dict[str, Any] | None:
    if payload.strip() == DONE:
        return None
    try:
        chunk = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    return chunk if isinstance(chunk, dict) else None


def _content(choice: object) -> str | None:
    """Choice 0's text in this delta ("" for none); None when the choice carries anything a
    resend could not be checked against (another index, tool calls, logprobs, ...)."""
    if not isinstance(choice, dict) or choice.get("index", 0) != 0:
        return None
    if not empty_value(choice.get("logprobs")):
        return None
    delta = choice.get("delta")
    if delta is None:
        return ""
    if not isinstance(delta, dict):
        return None
    for key, value in delta.items():
        if key not in _DELTA_KEYS and not empty_value(value):
            return None
    content = delta.get("content")
    if content is None:
        return ""
    return content if isinstance(content, str) else None
