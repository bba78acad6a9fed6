"""prefix_affinity's chain memo and load guard, on plain endpoints (no network, no clock)."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.upstreams.pool.chain import ChainMemo, block_chain, render_conversation
from hybrid_gateway.upstreams.pool.endpoint import Request
from hybrid_gateway.upstreams.pool.prefix import PrefixAffinity
from hybrid_gateway.upstreams.pool.settings import BalancingConfig
from tests.upstreams.pool.helpers import conversation, endpoints

SYSTEM = "You are a careful assistant for a bank's customer service. " * 20

text = st.text(alphabet="ab c\u00e9\u4e2d", max_size=90)
content = st.one_of(
    text,
    st.lists(
        st.one_of(
            st.fixed_dictionaries({"type": st.just("text"), "text": text}), st.just("not a part")
        ),
        max_size=3,
    ),
    st.none(),
)
message = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant"]), "content": content}
    ),
    st.fixed_dictionaries({"content": content}),  # no role
    st.just("not a message"),
)


@settings(max_examples=200)
@given(
    conversations=st.lists(st.lists(message, min_size=1, max_size=8), min_size=1, max_size=4),
    order=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 8)), min_size=1, max_size=30),
    block=st.sampled_from([16, 32, 64]),
    budget=st.sampled_from([1, 200, 100_000]),
)
def test_the_memo_gives_the_chain_of_the_whole_rendering(
    conversations: list[list[Any]], order: list[tuple[int, int]], block: int, budget: int
) -> None:
    """Turns of a few conversations in any order (each a prefix of its conversation, parsed
    afresh as the gateway does), with a memo that forgets often or never."""
    memo = ChainMemo(block, budget)
    for which, turns in order:
        messages = conversations[which % len(conversations)][:turns]
        body = copy.deepcopy({"model": "m", "messages": messages})
        assert memo.chain(body) == tuple(block_chain(render_conversation(body), block))
    assert memo.chain({"messages": "nope"}) == () and memo.chain([1]) == ()


def test_a_turn_hashes_only_its_new_messages() -> None:
    memo = ChainMemo(32, 1_000_000)
    hashed: list[int] = []  # messages hashed, per extension
    extend = memo._extend

    def counted(prefix: Any, added: list[object]) -> Any:
        hashed.append(len(added))
        return extend(prefix, added)

    memo._extend = counted  # type: ignore[method-assign]
    memo.chain(copy.deepcopy(conversation(SYSTEM, "q1")))
    assert hashed == [1, 1]  # the system prompt alone (others may share it), then the question
    memo.chain(copy.deepcopy(conversation(SYSTEM, "q1", "a1", "q2")))
    assert hashed[2:] == [2]  # the answer and the next question
    memo.chain(copy.deepcopy(conversation(SYSTEM, "another")))
    assert hashed[3:] == [1]  # not the shared system prompt
    memo.chain(copy.deepcopy(conversation(SYSTEM, "q1", "a1", "q2")))
    assert hashed[4:] == [2]  # the same list again: from the previous turn, as a next turn


def _placer(config: BalancingConfig) -> Callable[..., str]:
    """Where a conversation's next turn goes, its home and the three others loaded so."""
    eps = endpoints(4, ManualClock())
    policy = PrefixAffinity(config, 4)
    body = conversation(SYSTEM, "q")
    home = policy.choose(eps, Request(body)).endpoint
    others = [e for e in eps if e is not home]

    def place(home_load: int, *loads: int) -> str:
        home.in_flight = home_load
        for e, load in zip(others, loads, strict=True):
            e.in_flight = load
        choice = policy.choose(eps, Request(copy.deepcopy(body)))
        if choice.endpoint is home:
            return "home"
        policy.forget(choice.endpoint)  # home stays the prefix's only holder
        return "moved"

    return place


def test_the_guard_compares_with_the_mean_and_is_relative_at_large_loads() -> None:
    place = _placer(BalancingConfig(policy="prefix_affinity", block_chars=32, balance_abs=1,
                                    balance_rel=1.5))  # fmt: skip
    assert place(3, 2, 2, 1) == "home"  # mean 2: 3 is only 1 above it
    assert place(4, 2, 2, 0) == "moved"  # mean 2: 4 - 2 > 1 and 4 > 1.5 * 2
    assert place(150, 100, 100, 100) == "home"  # mean 112.5: 150 < 1.5 * 112.5
    assert place(200, 100, 100, 100) == "moved"  # mean 125: 200 > 187.5


def test_the_default_guard_trips_one_request_above_the_mean_at_small_loads() -> None:
    place = _placer(BalancingConfig(policy="prefix_affinity", block_chars=32))  # 0.25 / 1.25
    assert place(2, 2, 2, 2) == "home"
    assert place(2, 2, 1, 1) == "moved"  # mean 1.5: 2 - 1.5 > 0.25 and 2 > 1.25 * 1.5
    assert place(3, 2, 2, 1) == "moved"  # mean 2: 3 - 2 > 0.25 and 3 > 1.25 * 2
    assert place(3, 3, 3, 2) == "home"  # mean 2.75: only 0.25 above it
    assert place(130, 100, 100, 100) == "home"  # mean 107.5: 130 < 134.4
    assert place(140, 100, 100, 100) == "moved"  # mean 110: 140 > 137.5


def test_a_guarded_request_goes_to_a_shorter_match_before_an_empty_endpoint() -> None:
    eps = endpoints(3, ManualClock())
    config = BalancingConfig(
        policy="prefix_affinity", block_chars=32, match_threshold=0.3, match_slack=0
    )  # (the system prompt's match is within 0.3)
    policy = PrefixAffinity(config, 3)
    q1, a1, q2 = "first question " * 6, "an answer " * 6, "second question " * 6
    home = policy.choose(eps, Request(conversation(SYSTEM, q1))).endpoint
    home.in_flight = 9  # the guard sends a second conversation on the same system prompt away
    moved = policy.choose(eps, Request(conversation(SYSTEM, "something else")))
    assert moved.endpoint is not home and moved.reason.endswith("guard=load")
    shared, empty = moved.endpoint, next(e for e in eps if e not in (home, moved.endpoint))
    home.in_flight, shared.in_flight, empty.in_flight = 6, 1, 0  # mean 2.3: home is out
    follow = policy.choose(eps, Request(conversation(SYSTEM, q1, a1, q2)))
    # not the idle endpoint: the one with the system prompt cached, which the guard allows
    assert follow.endpoint is shared and follow.reason.endswith("guard=load")
    home.in_flight = 2
    again = policy.choose(eps, Request(conversation(SYSTEM, q1, a1, q2)))
    assert again.endpoint is shared and again.reason.startswith("match=1.00")


def test_match_slack_lets_a_moved_conversation_use_both_of_its_homes() -> None:
    q1, a1, q2, a2, q3 = ("question one " * 6, "answer one " * 6, "question two " * 6,
                          "answer two " * 6, "question three " * 6)  # fmt: skip

    def third_turn(slack: float, loads: tuple[int, int, int]) -> tuple[int, int, str]:
        eps = endpoints(4, ManualClock())
        config = BalancingConfig(policy="prefix_affinity", block_chars=32, match_slack=slack)
        policy = PrefixAffinity(config, 4)
        first = policy.choose(eps, Request(conversation(SYSTEM, q1))).endpoint
        first.in_flight = 9  # the guard moves the second turn away from it
        second = policy.choose(eps, Request(conversation(SYSTEM, q1, a1, q2)))
        assert second.endpoint is not first and second.reason.endswith("guard=load")
        rest = [e for e in eps if e not in (first, second.endpoint)]
        first.in_flight, second.endpoint.in_flight = loads[:2]
        for e in rest:
            e.in_flight = loads[2]
        choice = policy.choose(eps, Request(conversation(SYSTEM, q1, a1, q2, a2, q3)))
        homes = {first.index: 1, second.endpoint.index: 2}
        return homes.get(choice.endpoint.index, 0), choice.endpoint.index, choice.reason

    # the first home (turn 1 cached, about 0.7 of this turn) is less busy than the second
    # (turns 1-2 cached, the longest match); the others hold only the system prompt
    assert third_turn(0.0, (1, 2, 2))[0] == 2  # no slack: the longest match
    assert third_turn(0.05, (1, 2, 2))[0] == 2  # the first home is further behind than 0.05
    home, _, reason = third_turn(0.5, (1, 2, 2))
    assert home == 1 and re.fullmatch(r"match=0\.9\d; near=0\.[6-8]\d", reason), reason
    assert third_turn(0.5, (2, 2, 2))[0] == 2  # equally busy: the longer match
    # the guard still applies to the group's choice: both homes loaded, an idle one takes it
    home, _, reason = third_turn(0.5, (9, 9, 0))
    assert home == 0 and reason.endswith("guard=load")
