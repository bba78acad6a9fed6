"""The request an endpoint pool is dispatching for, carried across its attempts.

The dispatcher binds the ``RequestRecord`` before its first attempt (``bind_attempts``, one
``ContextVar.set``); a pool reads it to learn which endpoints this request already tried (a
retry goes elsewhere when it can), the session header, and to note its decision on the route.
Bound per task: an aiohttp handler task, or a deadline's shadow task with its own copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, replace

from hybrid_gateway.types import EndpointChoice, RequestRecord

__all__ = ["REQUEST_HEADERS", "Attempts", "bind_attempts", "current_attempts"]

# record.extra key: the request's headers (api/routes.py), read by the session policy
REQUEST_HEADERS = "request_headers"
_EXTRA_KEY = "endpoint_attempts"

_RECORD: ContextVar[RequestRecord | None] = ContextVar("hybrid_gateway_pool_record", default=None)


@dataclass(slots=True)
class Attempts:
    """One request's endpoint history: per channel, the endpoints that failed it."""

    record: RequestRecord
    tried: dict[str, set[str]] = field(default_factory=dict)

    def failed_on(self, channel: str) -> set[str]:
        return self.tried.setdefault(channel, set())

    def header(self, name: str) -> str | None:
        headers = self.record.extra.get(REQUEST_HEADERS)
        if isinstance(headers, Mapping):
            value = headers.get(name)
            return value if isinstance(value, str) and value else None
        return None

    def note(self, choice: EndpointChoice) -> None:
        """Name the endpoint that answers in the route (x-gateway-route, the request log)."""
        route = self.record.route
        if route is not None and route.channel == choice.channel:
            self.record.route = replace(route, endpoint=choice)

    def resumed(self, channel: str, broken: str, chars: int) -> None:
        """The stream now answering was resent after ``broken`` died ``chars`` characters into
        it: said in the endpoint's reason (x-gateway-route is gone by then; the request log)."""
        route = self.record.route
        choice = route.endpoint if route is not None else None
        if route is not None and choice is not None and choice.channel == channel:
            note = f"resumed_from={broken}; resumed_at={chars}"
            reason = f"{choice.reason}; {note}" if choice.reason else note
            self.record.route = replace(route, endpoint=replace(choice, reason=reason))


def bind_attempts(record: RequestRecord) -> None:
    """Attempts from now on in this task dispatch ``record`` (the dispatcher, before the first)."""
    _RECORD.set(record)


def current_attempts() -> Attempts | None:
    record = _RECORD.get()
    if record is None:
        return None
    attempts = record.extra.get(_EXTRA_KEY)
    if not isinstance(attempts, Attempts) or attempts.record is not record:
        # (a deadline's shadow record starts with a copy of the original's extra)
        attempts = record.extra[_EXTRA_KEY] = Attempts(record)
    return attempts
