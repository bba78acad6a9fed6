"""One non-streamed answer from a lane, for audits and the llm judge, with what it cost."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hybrid_gateway.accounting.prices import Price
from hybrid_gateway.accounting.tokens import count_prompt_tokens, count_tokens
from hybrid_gateway.learning.judges import LaneAnswer
from hybrid_gateway.pipeline.streaming import usage_from_completion
from hybrid_gateway.resilience.dispatch import Dispatcher
from hybrid_gateway.routing.rules import message_text
from hybrid_gateway.types import RequestRecord, RouteDecision, Usage

__all__ = ["LaneCaller", "answer_text_of"]


class LaneCaller:
    def __init__(
        self,
        dispatcher: Dispatcher,
        lanes: Mapping[str, Sequence[str]],
        prices: Mapping[str, Price],
        wall: Callable[[], float],
    ) -> None:
        """``lanes``: lane -> its channels (primary first, then its backup)."""
        self._dispatcher = dispatcher
        self._lanes = lanes
        self._prices = prices
        self._wall = wall

    def price(self, lane: str, usage: Usage) -> float:
        """What ``usage`` costs on the dearest of the lane's channels (the backup may answer)."""
        return max(self._prices[channel].cost(usage) for channel in self._lanes[lane])

    async def ask(
        self, lane: str, body: Mapping[str, Any], record: RequestRecord | None = None
    ) -> LaneAnswer:
        """``body`` answered by ``lane`` through the dispatcher (breaker, backup, retries, the
        lane's queue slot), as a shadow of ``record`` (never logged as a request)."""
        rid = record.request_id if record is not None else "judge"
        shadow = RequestRecord(
            request_id=f"{rid}.audit", started_at=self._wall(),
            tenant=record.tenant if record is not None else "default",
            route=RouteDecision(lane, self._lanes[lane][0], "audit"),
        )  # fmt: skip
        channel, (_, parsed) = await self._dispatcher.complete(shadow, body)
        text = answer_text_of(parsed)
        usage = usage_from_completion(parsed)
        if usage is None:
            messages = body.get("messages") or ()
            prompt = count_prompt_tokens(message_text(m.get("content")) for m in messages)
            usage = Usage(prompt, count_tokens(text), estimated=True)
        return LaneAnswer(text, self._prices[channel.name].cost(usage))


def answer_text_of(parsed: Mapping[str, Any]) -> str:
    """The first choice's message text ("" when there is none)."""
    choices = parsed.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return ""
    message = choices[0].get("message")
    return message_text(message.get("content")) if isinstance(message, dict) else ""
