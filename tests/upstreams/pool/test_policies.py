"""The balancing policies choose among candidates; each test states the behaviour it pins."""

from __future__ import annotations

import itertools
import random
from collections import Counter

from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.upstreams.pool.endpoint import Request
from hybrid_gateway.upstreams.pool.policies import (
    POLICIES,
    LeastOutstanding,
    RoundRobin,
    Session,
    least_loaded,
)
from hybrid_gateway.upstreams.pool.prefix import PrefixAffinity, block_chain, render_conversation
from hybrid_gateway.upstreams.pool.settings import BalancingConfig
from tests.upstreams.pool.helpers import conversation, endpoints

SYSTEM = "You are a careful assistant for a bank's customer service. " * 20


def test_every_configurable_policy_is_registered() -> None:
    clock = ManualClock()
    eps = endpoints(3, clock)
    for name in ("round_robin", "least_outstanding", "prefix_affinity", "session"):
        policy = POLICIES[name](BalancingConfig(policy=name), eps, random.Random(1))
        assert policy.name == name
        assert policy.choose(eps, Request(conversation("s", "q"))).endpoint in eps


def test_round_robin_gives_each_endpoint_its_weights_share_interleaved() -> None:
    eps = endpoints(3, ManualClock(), weights=[1, 2, 1])
    policy = RoundRobin(eps)
    picks = [policy.choose(eps, Request({})).endpoint.name for _ in range(8)]
    assert Counter(picks) == {"e0": 2, "e1": 4, "e2": 2}
    assert all(a != b or a == "e1" for a, b in itertools.pairwise(picks))


def test_round_robin_skips_endpoints_that_are_not_candidates() -> None:
    eps = endpoints(3, ManualClock())
    policy = RoundRobin(eps)
    picks = {policy.choose([eps[0], eps[2]], Request({})).endpoint.name for _ in range(6)}
    assert picks == {"e0", "e2"}


def test_least_outstanding_picks_the_less_loaded_of_its_two_samples() -> None:
    eps = endpoints(2, ManualClock())
    eps[0].in_flight, eps[1].in_flight = 5, 1
    policy = LeastOutstanding(random.Random(3))
    assert {policy.choose(eps, Request({})).endpoint.name for _ in range(20)} == {"e1"}


def test_least_outstanding_keeps_load_even_under_a_steady_stream() -> None:
    eps = endpoints(8, ManualClock())
    policy = LeastOutstanding(random.Random(7))
    for _ in range(800):  # requests arrive and stay: in-flight counts show the spread
        policy.choose(eps, Request({})).endpoint.in_flight += 1
    loads = [e.in_flight for e in eps]
    assert max(loads) <= 1.15 * (sum(loads) / len(loads))


def test_least_loaded_divides_by_weight_and_rotates_ties() -> None:
    eps = endpoints(3, ManualClock(), weights=[1, 4, 1])
    eps[0].in_flight, eps[1].in_flight, eps[2].in_flight = 1, 2, 1
    assert least_loaded(eps).name == "e1"  # 2/4 < 1/1
    for e in eps:
        e.in_flight = 0
    assert {least_loaded(eps, start).name for start in range(3)} == {"e0", "e1", "e2"}


def test_session_is_sticky_and_moves_only_the_sessions_of_a_missing_endpoint() -> None:
    eps = endpoints(4, ManualClock())
    policy = Session(eps, LeastOutstanding(random.Random(1)))
    users = [f"user-{i}" for i in range(400)]
    home = {u: policy.choose(eps, Request({}, session=u)).endpoint.name for u in users}
    assert home == {u: policy.choose(eps, Request({}, session=u)).endpoint.name for u in users}
    assert set(Counter(home.values())) == {"e0", "e1", "e2", "e3"}
    assert min(Counter(home.values()).values()) > 50  # spread over all four
    without = [e for e in eps if e.name != "e2"]
    moved = {u: policy.choose(without, Request({}, session=u)) for u in users}
    for user, choice in moved.items():
        if home[user] != "e2":
            assert choice.endpoint.name == home[user] and choice.reason == ""
        else:
            assert choice.endpoint.name != "e2" and choice.reason == "session=moved"


def test_session_without_a_key_goes_to_the_fallback() -> None:
    eps = endpoints(2, ManualClock())
    eps[0].in_flight = 9
    choice = Session(eps, LeastOutstanding(random.Random(1))).choose(eps, Request({}))
    assert choice.endpoint.name == "e1" and choice.reason == "session=none"


def test_the_chain_covers_whole_blocks_and_equal_prefixes_share_hashes() -> None:
    first, second = "first question " * 10, "another one entirely " * 10
    a = block_chain(render_conversation(conversation(SYSTEM, first)), 64)
    b = block_chain(render_conversation(conversation(SYSTEM, second)), 64)
    assert len(a) == len(render_conversation(conversation(SYSTEM, first))) // 64
    shared = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    assert shared == len(f"<|system|>{SYSTEM}") // 64
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert render_conversation({"messages": [{"role": "user", "content": parts}]}) == "<|user|>ab"


def test_prefix_affinity_follows_a_conversation_and_spreads_new_ones() -> None:
    eps = endpoints(4, ManualClock())
    policy = PrefixAffinity(BalancingConfig(policy="prefix_affinity", block_chars=32), 4)
    firsts = {}
    for c in range(8):  # eight conversations, each with its own long system prompt
        system = f"conversation {c}: " + SYSTEM
        first = policy.choose(eps, Request(conversation(system, "hello")))
        assert "least_loaded" in first.reason
        firsts[c] = first.endpoint.name
        follow = policy.choose(eps, Request(conversation(system, "hello", "hi!", "and then?")))
        assert follow.endpoint.name == first.endpoint.name
        assert follow.reason.startswith("match=0.9")
    assert Counter(firsts.values()) == {"e0": 2, "e1": 2, "e2": 2, "e3": 2}


def test_prefix_affinity_load_guard_and_threshold() -> None:
    eps = endpoints(2, ManualClock())
    config = BalancingConfig(policy="prefix_affinity", block_chars=32, balance_abs=1,
                             balance_rel=1.5, match_threshold=0.5)  # fmt: skip
    policy = PrefixAffinity(config, 2)
    body = conversation(SYSTEM, "q")
    home = policy.choose(eps, Request(body)).endpoint
    other = eps[1 - home.index]
    home.in_flight = 3  # mean 1.5: 3 - 1.5 > 1 and 3 > 1.5 * 1.5: off to the idle one
    choice = policy.choose(eps, Request(body))
    assert choice.endpoint is other and choice.reason.endswith("guard=load")
    short = conversation("x", "a totally different question that shares nothing at all")
    assert policy.choose(eps, Request(short)).reason.endswith("least_loaded")


def test_prefix_affinity_forgets_an_ejected_endpoint_and_stays_bounded() -> None:
    eps = endpoints(2, ManualClock())
    config = BalancingConfig(policy="prefix_affinity", block_chars=16, max_blocks=64)
    policy = PrefixAffinity(config, 2)
    body = conversation(SYSTEM, "q")
    home = policy.choose(eps, Request(body)).endpoint
    policy.forget(home)
    assert policy.choose(eps, Request(body)).reason.endswith("least_loaded")
    for i in range(50):
        policy.choose(eps, Request(conversation(f"{i} " + SYSTEM, "q")))
    assert policy.blocks <= 64
