"""The shared-prefix workloads: multi-turn conversations and the Mooncake trace's prefixes."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from hybrid_gateway.tools.workload.conversations import (
    ConversationPlan,
    build_conversations,
    load_texts,
    mooncake_prompts,
)

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data is not here")


def test_each_turn_starts_with_the_previous_turns_prompt_and_systems_are_shared() -> None:
    plan = ConversationPlan(conversations=8, turns=4, system_prompts=2, system_tokens=256,
                            context_tokens=128, rate=2.0, seed=3)  # fmt: skip
    conversations = build_conversations(load_texts(DATA), plan)
    assert len(conversations) == 8 and len({c.system for c in conversations}) == 2
    assert all(len(c.questions) == 4 for c in conversations)
    starts = [c.start_s for c in conversations]
    assert starts == sorted(starts) and starts[-1] > 0
    first = conversations[0]
    answers = ["answer one", "answer two", "answer three"]
    turns = [first.messages(t, answers) for t in range(4)]
    for earlier, later in itertools.pairwise(turns):
        assert later[: len(earlier)] == earlier  # a prefix of the next turn
    assert len(turns[3]) == 2 + 2 * 3
    assert 900 <= len(first.system) <= 256 * 4 + 100
    assert build_conversations(load_texts(DATA), plan) == conversations  # seeded


def test_mooncake_blocks_become_text_shared_exactly_where_the_trace_shares_them() -> None:
    trace = DATA / "traces" / "mooncake_conversation.jsonl"
    prompts = list(mooncake_prompts(trace, load_texts(DATA), block_tokens=16, limit=5))
    assert len(prompts) == 5
    texts = [p.messages[0]["content"] for p in prompts]
    block = texts[0].split(" [1] ")[0]  # every request of the trace starts with block 0
    assert block.startswith("[0] ") and all(t.startswith(block) for t in texts)
    assert prompts[0].start_s == 0.0 and prompts[0].max_tokens == 48
    replay = prompts[1].as_conversation(1)  # sent as a one-turn conversation: the same text
    assert replay.messages(0, []) == [{"role": "user", "content": texts[1]}]
