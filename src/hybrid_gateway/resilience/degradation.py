"""The degradation parts of one gateway, built from the config and closed together.

Lane gates (``lanes.py``), the deadline fallback with its results store and webhook
(``deadline.py``, ``results/``) and load shedding (``shedding.py``) each stay off unless their
config asks for them, so a config without those keys runs the request path it always ran.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.resilience.deadline import DeadlinePolicy, DeferredListener, DeferredRunner
from hybrid_gateway.resilience.lanes import LaneGates
from hybrid_gateway.resilience.shedding import Shedder
from hybrid_gateway.results.store import ResultsStore
from hybrid_gateway.results.webhook import (
    AiohttpPoster,
    DeliveryListener,
    Poster,
    WebhookSender,
)
from hybrid_gateway.types import RequestRecord

if TYPE_CHECKING:
    from hybrid_gateway.config import GatewayConfig

__all__ = ["Degradation", "DegradationGauges"]


class DegradationGauges(Protocol):
    """Where the point-in-time figures go when /metrics is rendered."""

    def lane_queue(self, lane: str, channel: str, waiting: int, active: int) -> None: ...

    def lane_rejected_total(self, lane: str, channel: str, code: str, total: int) -> None: ...

    def degradation(self, background: int, results: int, shedding: bool) -> None: ...


class DegradationListener(DeferredListener, DeliveryListener, Protocol):
    pass


@dataclass(slots=True)
class Degradation:
    gates: LaneGates
    results: ResultsStore
    deferred: DeferredRunner | None
    shedder: Shedder | None
    webhook: WebhookSender | None

    @classmethod
    def build(
        cls,
        config: GatewayConfig,
        clock: Clock,
        *,
        log: Callable[[RequestRecord], None] | None,
        listeners: Sequence[DegradationListener] = (),
        poster: Poster | None = None,
    ) -> Degradation:
        lanes = config.lanes
        gates = LaneGates.build(
            {
                name: (lane.queue, (lane.channel,) + ((lane.backup,) if lane.backup else ()))
                for name, lane in lanes.items()
            },
            clock,
        )
        deferred_cfg = config.resilience.deferred
        results = ResultsStore(
            clock, ttl_s=deferred_cfg.ttl_s, max_entries=deferred_cfg.max_entries
        )
        policies = {
            name: DeadlinePolicy(
                lane.deadline_s,
                lane.fallback_lane,
                lanes[lane.fallback_lane].channel,
                first_token=lane.deadline_on == "first_token",
                stall_s=lane.stall_s,
            )
            for name, lane in lanes.items()
            if lane.deadline_s is not None and lane.fallback_lane is not None
        }
        webhook = None
        if deferred_cfg.webhook is not None and policies:
            webhook = WebhookSender(
                deferred_cfg.webhook, poster or AiohttpPoster(), clock, listeners
            )
        deferred = (
            DeferredRunner(
                policies,
                clock,
                results,
                max_background=deferred_cfg.max_background,
                log=log,
                webhook=webhook,
                listeners=listeners,
            )
            if policies
            else None
        )
        shedding = config.resilience.shedding
        shedder = Shedder(shedding, config.tenants, clock) if shedding.enabled else None
        return cls(gates, results, deferred, shedder, webhook)

    def observe(self, record: RequestRecord) -> None:
        """Every answered request passes here (feeds the shedding monitor)."""
        if self.shedder is not None:
            self.shedder.observe(record)

    def export(self, gauges: DegradationGauges) -> None:
        for (lane, channel), gate in self.gates.gates.items():
            gauges.lane_queue(lane, channel, gate.waiting, gate.active)
            for code, total in gate.rejected.items():
                gauges.lane_rejected_total(lane, channel, code, total)
        background = self.deferred.background if self.deferred is not None else 0
        shedding = self.shedder.active if self.shedder is not None else False
        gauges.degradation(background, len(self.results), shedding)

    async def aclose(self) -> None:
        """Cancel background requests first (their results say so), then the webhook."""
        if self.deferred is not None:
            await self.deferred.aclose()
        if self.webhook is not None:
            await self.webhook.aclose()
