"""The daily spend cap per tenant and audit stream, on an injected wall clock (UTC days).

An audit reserves its estimated cost before it starts (shadow answer + judge) and is skipped
when the reservation would take the day's spend past the cap; when it ends, the reservation is
replaced by what it really cost.  The shadow request's ``max_tokens`` is set from the same
estimate, so an audit costs at most its reservation (up to the upstream's own token count of
the prompt).  At the UTC day's turn the spend starts again from zero.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["DAY_S", "Reservation", "SpendCaps"]

DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class Reservation:
    kind: str
    tenant: str
    day: int
    amount: float


class SpendCaps:
    def __init__(self, caps: Mapping[str, float], wall: Callable[[], float]) -> None:
        """``caps``: audit stream -> USD per tenant per UTC day."""
        self._caps = dict(caps)
        self._wall = wall
        self._day = self._today()
        self._spent: dict[tuple[str, str], float] = {}
        self._reserved: dict[tuple[str, str], float] = {}

    def reserve(self, kind: str, tenant: str, amount: float) -> Reservation | None:
        """Hold ``amount`` of today's cap, or None when it does not fit."""
        self._turn()
        key = (kind, tenant)
        held = self._spent.get(key, 0.0) + self._reserved.get(key, 0.0)
        if held + amount > self._caps.get(kind, 0.0):
            return None
        self._reserved[key] = self._reserved.get(key, 0.0) + amount
        return Reservation(kind, tenant, self._day, amount)

    def settle(self, reservation: Reservation, actual: float) -> None:
        """Replace the reservation by the real cost (a reservation from a past day is gone)."""
        self._turn()
        if reservation.day != self._day:
            return
        key = (reservation.kind, reservation.tenant)
        self._reserved[key] = max(self._reserved.get(key, 0.0) - reservation.amount, 0.0)
        self._spent[key] = self._spent.get(key, 0.0) + actual

    def spent(self, kind: str, tenant: str) -> float:
        self._turn()
        return self._spent.get((kind, tenant), 0.0)

    def _today(self) -> int:
        return int(self._wall() // DAY_S)

    def _turn(self) -> None:
        today = self._today()
        if today != self._day:
            self._day = today
            self._spent.clear()
            self._reserved.clear()
