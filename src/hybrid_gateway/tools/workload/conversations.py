"""Workloads whose requests share prefixes: multi-turn conversations over shared system prompts.

Each conversation has one of ``system_prompts`` long system prompts (shared by many
conversations, as a product's assistant prompt is), its own context document (a user's file or
retrieved pages, ``context_tokens`` long) and ``turns`` questions asked one after the other,
each turn resending the whole history with the answers received.  So turn k's prompt starts
with turn k-1's prompt: on the server that answered it, all of that is in the KV cache.

The text is real: MATH-500 problems from ``../shared/data/queries`` (read at build time, never
copied into the package).  Conversations start at Poisson times (``rate`` per second); the
schedule depends on ``seed`` only, so every policy of a bench sees the same offered load.

``mooncake_prompts`` replays the Mooncake conversation trace's prefix structure instead: each
512-token block id of the trace becomes a block of text of ``block_tokens`` tokens (scaled down,
so a CPU can carry it), so requests share exactly the prefixes the trace's requests share.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from hybrid_gateway.tools.workload.sources import MATH500_PREFIX, DataMissingError

__all__ = [
    "Conversation", "ConversationPlan", "TracePrompt", "build_conversations", "load_texts",
    "mooncake_prompts",
]  # fmt: skip

CHARS_PER_TOKEN = 4  # the tokenizer's average (accounting/tokens.py) for this English text


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    start_s: float
    system: str
    context: str
    questions: tuple[str, ...]
    # the answer length asked for each turn (max_tokens)
    max_tokens: int

    def messages(self, turn: int, answers: list[str]) -> list[dict[str, str]]:
        """Turn ``turn``'s messages: system, the context with the first question, then each
        earlier answer and question in order (``answers`` holds the answers received)."""
        first = f"{self.context}\n\n{self.questions[0]}" if self.context else self.questions[0]
        out = [{"role": "user", "content": first}]
        if self.system:
            out.insert(0, {"role": "system", "content": self.system})
        for k in range(1, turn + 1):
            out.append({"role": "assistant", "content": answers[k - 1]})
            out.append({"role": "user", "content": self.questions[k]})
        return out


@dataclass(frozen=True, slots=True)
class ConversationPlan:
    conversations: int = 48
    turns: int = 6
    system_prompts: int = 4
    system_tokens: int = 1024
    context_tokens: int = 1024
    rate: float = 4.0  # conversation starts per second
    max_tokens: int = 48
    seed: int = 0


def load_texts(data_dir: Path) -> list[str]:
    """MATH-500 problems, the instruction prefix removed."""
    path = data_dir / "queries" / "math500_levels.jsonl"
    if not path.is_file():
        raise DataMissingError(f"{path} not found (the data README lists it)")
    texts = []
    for line in path.read_bytes().splitlines():
        if line.strip():
            problem = str(orjson.loads(line)["problem"]).removeprefix(MATH500_PREFIX).strip()
            texts.append(" ".join(problem.split()))
    return texts


def _text_of(texts: list[str], tokens: int, rng: random.Random) -> str:
    """About ``tokens`` tokens of real text: problems drawn at random, joined."""
    parts: list[str] = []
    size = 0
    while size < tokens * CHARS_PER_TOKEN:
        part = rng.choice(texts)
        parts.append(part)
        size += len(part) + 1
    return " ".join(parts)[: tokens * CHARS_PER_TOKEN]


def build_conversations(texts: list[str], plan: ConversationPlan) -> list[Conversation]:
    rng = random.Random(plan.seed)
    systems = [
        f"You are tutor #{i} of a mathematics school. Answer briefly, then explain. "
        + _text_of(texts, plan.system_tokens, rng)
        for i in range(plan.system_prompts)
    ]
    out: list[Conversation] = []
    start = 0.0
    for c in range(plan.conversations):
        start += rng.expovariate(plan.rate)
        out.append(Conversation(
            id=f"conv-{c:04d}", start_s=round(start, 4), system=systems[c % len(systems)],
            context=f"Worksheet {c}: " + _text_of(texts, plan.context_tokens, rng),
            questions=tuple(rng.choice(texts) for _ in range(plan.turns)),
            max_tokens=plan.max_tokens,
        ))  # fmt: skip
    return out


@dataclass(frozen=True, slots=True)
class TracePrompt:
    start_s: float
    messages: tuple[dict[str, str], ...]
    max_tokens: int

    def as_conversation(self, i: int) -> Conversation:
        """A one-turn conversation sending exactly this prompt (to replay it like the others)."""
        text = self.messages[0]["content"]
        return Conversation(id=f"trace-{i:05d}", start_s=self.start_s, system="", context="",
                            questions=(text,), max_tokens=self.max_tokens)  # fmt: skip


def mooncake_prompts(
    trace: Path, texts: list[str], *, block_tokens: int = 64, limit: int = 500,
    max_tokens: int = 48, speedup: float = 1.0,
) -> Iterator[TracePrompt]:  # fmt: skip
    """The trace's first ``limit`` requests as prompts with the same shared prefixes."""
    blocks: dict[int, str] = {}
    for n, line in enumerate(trace.read_bytes().splitlines()):
        if n >= limit:
            return
        row = orjson.loads(line)
        text = []
        for block in row["hash_ids"]:
            if block not in blocks:
                rng = random.Random(block)
                blocks[block] = f"[{block}] " + _text_of(texts, block_tokens, rng)
            text.append(blocks[block])
        yield TracePrompt(
            start_s=row["timestamp"] / 1000.0 / speedup,
            messages=({"role": "user", "content": " ".join(text)},),
            max_tokens=max(1, min(max_tokens, int(row["output_length"]))),
        )
