"""What an answer cost: tokens x the channel's price per million tokens."""

from __future__ import annotations

from dataclasses import dataclass

from hybrid_gateway.types import Usage


@dataclass(frozen=True, slots=True)
class Price:
    per_1m_input: float
    per_1m_output: float

    def cost(self, usage: Usage) -> float:
        return (
            usage.prompt_tokens * self.per_1m_input + usage.completion_tokens * self.per_1m_output
        ) / 1_000_000
