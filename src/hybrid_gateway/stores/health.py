"""Is the shared store up?  One small state machine, so an outage costs requests nothing.

After a failed command the store is *down*: callers get ``StoreUnavailable`` at once (their
outage policy applies) instead of each waiting out a connect timeout.  Once ``retry_s`` has
passed, one call is let through to try again (the background sync pings too); the first
success marks the store up.  Transitions and errors go to listeners (metrics, logs).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.stores.base import StoreUnavailable

__all__ = ["StoreHealth", "StoreListener"]

_log = logging.getLogger(__name__)


class StoreListener(Protocol):
    def store_state(self, up: bool) -> None: ...

    def store_error(self, op: str) -> None: ...


class StoreHealth:
    def __init__(
        self, clock: Clock, *, retry_s: float, listeners: Sequence[StoreListener] = ()
    ) -> None:
        self._clock = clock
        self._retry_s = retry_s
        self._listeners = list(listeners)
        self.up = True
        self.errors = 0
        self.last_error: str | None = None
        self._retry_at = 0.0

    @property
    def retry_s(self) -> float:
        return self._retry_s

    def listen(self, listener: StoreListener) -> None:
        self._listeners.append(listener)
        listener.store_state(self.up)

    def check(self) -> None:
        """Raise ``StoreUnavailable`` while down, except for one try every ``retry_s``."""
        if self.up:
            return
        now = self._clock.now()
        if now < self._retry_at:
            raise StoreUnavailable(f"store down: {self.last_error}")
        self._retry_at = now + self._retry_s  # this caller tries; the others keep failing fast

    def failed(self, op: str, exc: BaseException) -> None:
        self.errors += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        self._retry_at = self._clock.now() + self._retry_s
        for listener in self._listeners:
            listener.store_error(op)
        if self.up:
            self.up = False
            _log.warning("shared store down (%s): %s", op, self.last_error)
            for listener in self._listeners:
                listener.store_state(False)

    def succeeded(self) -> None:
        if not self.up:
            self.up = True
            _log.warning("shared store back up")
            for listener in self._listeners:
                listener.store_state(True)

    def status(self) -> dict[str, object]:
        return {"up": self.up, "errors": self.errors, "last_error": self.last_error}
