"""Is a lane too busy for an audit now?  Audits are the first thing dropped under load."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hybrid_gateway.resilience.breaker import BreakerState
from hybrid_gateway.resilience.dispatch import Dispatcher
from hybrid_gateway.resilience.lanes import LaneGates
from hybrid_gateway.resilience.shedding import Shedder

__all__ = ["LoadProbe", "lane_load_probe"]

# lane -> why it is busy ("shedding", "breaker", "queue"), or None when an audit may use it
LoadProbe = Callable[[str], str | None]


def lane_load_probe(
    lanes: Mapping[str, str],
    dispatcher: Dispatcher,
    *,
    gates: LaneGates | None = None,
    queue_slots: Mapping[str, int] | None = None,
    shedder: Shedder | None = None,
) -> LoadProbe:
    """``lanes``: lane -> its channel; ``queue_slots``: lane -> its queue's max_concurrency.

    Busy: load shedding is on; the channel's breaker is not closed; the lane's queue has a
    waiter, or its last free slot would go to the audit (one is always left to clients)."""
    slots = dict(queue_slots or {})

    def busy(lane: str) -> str | None:
        if shedder is not None and shedder.active:
            return "shedding"
        channel = lanes[lane]
        breaker = dispatcher.breaker(channel)
        if breaker is not None and breaker.state is not BreakerState.CLOSED:
            return "breaker"
        gate = gates.get(lane, channel) if gates is not None else None
        if gate is not None and (gate.waiting > 0 or gate.active + 1 >= slots.get(lane, 1)):
            return "queue"
        return None

    return busy
