"""prefix_affinity's placement of new conversations by live conversations per endpoint
(``new_conversations: live``, upstreams/pool/live.py), on the manual clock."""

from __future__ import annotations

from typing import Any, Literal

from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.upstreams.pool.endpoint import Endpoint, Request
from hybrid_gateway.upstreams.pool.prefix import PrefixAffinity
from hybrid_gateway.upstreams.pool.resize import prepare_resize
from hybrid_gateway.upstreams.pool.settings import BalancingConfig
from tests.upstreams.pool.held import channel, held_pool, spec
from tests.upstreams.pool.helpers import conversation, endpoints

SYSTEM = "You are a careful assistant for a bank's customer service. " * 20
WORKSHEET = "the figures of the quarter, line by line. " * 30  # (more than the system prompt)


def turns(c: int, n: int) -> dict[str, Any]:
    """Conversation ``c``'s turn ``n`` (1: its first): a shared system prompt, then its own
    worksheet and questions with the answers between them."""
    texts = [f"Worksheet {c}: {WORKSHEET}"]
    for k in range(1, n):
        texts += [f"answer {k} of conversation {c} " * 4, f"question {k} " * 6]
    return conversation(SYSTEM, *texts)


def setup(
    n: int, placement: Literal["live", "in_flight"] = "live", window: float = 60.0, guard: float = 8
) -> tuple[list[Endpoint], PrefixAffinity, ManualClock]:
    clock = ManualClock()
    eps = endpoints(n, clock)
    config = BalancingConfig(policy="prefix_affinity", block_chars=32, balance_abs=guard,
                             new_conversations=placement, live_window_s=window)  # fmt: skip
    return eps, PrefixAffinity(config, n, clock), clock


def place(policy: PrefixAffinity, eps: list[Endpoint], body: dict[str, Any]) -> Endpoint:
    return policy.choose(eps, Request(body)).endpoint


def loads(eps: list[Endpoint], *in_flight: int) -> None:
    for e, n in zip(eps, in_flight, strict=True):
        e.in_flight = n


def test_a_new_conversation_goes_where_fewest_are_live_whatever_is_in_flight_now() -> None:
    eps, policy, _ = setup(3)
    first = [place(policy, eps, turns(c, 1)).index for c in range(2)]
    assert sorted(first) != [first[0]] * 2  # two conversations, two endpoints
    idle = next(e for e in eps if e.index not in first)
    # the endpoint without a conversation is the busiest now (within the load guard)
    loads(eps, *[3 if e is idle else 0 for e in eps])
    choice = policy.choose(eps, Request(turns(2, 1)))
    assert choice.endpoint is idle and choice.reason.endswith("live=0")
    assert policy.live_counts == [1, 1, 1]
    # a later turn follows its conversation home, live counts or not
    for c, home in enumerate(first):
        assert place(policy, eps, turns(c, 3)).index == home
    assert policy.live_counts == [1, 1, 1]
    # by in-flight count now, the same new conversation would have gone to an idle endpoint
    eps, policy, _ = setup(3, "in_flight")
    first = [place(policy, eps, turns(c, 1)).index for c in range(2)]
    idle = next(e for e in eps if e.index not in first)
    loads(eps, *[3 if e is idle else 0 for e in eps])
    assert place(policy, eps, turns(2, 1)) is not idle
    assert policy.live_counts is None


def test_the_least_in_flight_breaks_a_tie_and_the_load_guard_still_applies() -> None:
    eps, policy, _ = setup(3, guard=0.25)  # the default guard: 0.25 / 1.25 of the mean
    loads(eps, 2, 1, 2)
    assert place(policy, eps, turns(0, 1)) is eps[1]  # all at 0 live: the least in flight
    loads(eps, 6, 0, 0)  # mean 2: eps[0] (0 live) is more than 0.25 and 1.25x above it
    choice = policy.choose(eps, Request(turns(1, 1)))
    assert choice.endpoint is eps[2] and choice.reason.endswith("live=0")


async def test_live_counts_expire_after_the_window_and_a_turn_renews_them() -> None:
    eps, policy, clock = setup(2, window=10.0)
    home = place(policy, eps, turns(0, 1))
    other = eps[1 - home.index]
    loads(eps, *[1 if e is other else 0 for e in eps])
    assert place(policy, eps, turns(1, 1)) is other  # home has 1 live, other 0
    await clock.advance(8)
    assert place(policy, eps, turns(0, 2)) is home  # conversation 0's next turn: live again
    await clock.advance(7)  # 15 s: conversation 1 (last turn at 0 s) is over; 0 (at 8 s) is not
    counts = policy.live_counts
    assert counts is not None and counts[home.index] == 1 and counts[other.index] == 0
    loads(eps, 0, 0)
    assert place(policy, eps, turns(2, 1)) is other
    await clock.advance(25)  # 40 s: all over: placed by in-flight count alone
    assert policy.live_counts == [0, 0]
    loads(eps, *[0 if e is home else 1 for e in eps])
    assert place(policy, eps, turns(3, 1)) is home
    # an expired conversation that comes back still goes home (its prefix is there)
    assert place(policy, eps, turns(1, 2)) is other


def test_an_ejected_endpoint_loses_its_conversations_and_memory_stays_bounded() -> None:
    eps, policy, _ = setup(2)
    home = place(policy, eps, turns(0, 1))
    place(policy, eps, turns(1, 1))
    policy.forget(home)
    counts = policy.live_counts
    assert counts is not None and counts[home.index] == 0 and sum(counts) == 1
    # its next turn matches nothing there any more: placed as a new conversation
    assert policy.choose(eps, Request(turns(0, 2))).reason.endswith("live=0")

    clock = ManualClock()
    eps = endpoints(2, clock)
    config = BalancingConfig(policy="prefix_affinity", block_chars=32, max_blocks=512)
    policy = PrefixAffinity(config, 2, clock)  # room for 64 conversations' ends
    for c in range(300):
        place(policy, eps, turns(c, 1))
    assert sum(policy.live_counts or []) <= 64
    live = policy._live
    assert live is not None and len(live._young) + len(live._old) <= 128


async def test_a_reload_keeps_the_live_counts_of_kept_endpoints_and_retunes_the_window() -> None:
    clock = ManualClock()
    up = held_pool(channel([spec("e0"), spec("e1"), spec("e2")], policy="prefix_affinity",
                           block_chars=32), clock)  # fmt: skip
    policy = up.policy
    assert isinstance(policy, PrefixAffinity)
    homes = [up.pick(Request(turns(c, 1)), set())[0].name for c in range(3)]
    assert sorted(homes) == ["e0", "e1", "e2"]
    prepare_resize(up, channel([spec("e2"), spec("e1")], policy="prefix_affinity",
                               block_chars=32, live_window_s=5)).apply()  # fmt: skip
    assert up.policy is policy and policy.live_counts == [1, 1]  # e0's conversation gone
    await clock.advance(6)  # the new window applies
    assert policy.live_counts == [0, 0]
    prepare_resize(up, channel([spec("e2"), spec("e1")], policy="prefix_affinity",
                               block_chars=32, new_conversations="in_flight")).apply()  # fmt: skip
    assert up.policy is policy and policy.live_counts is None
    prepare_resize(up, channel([spec("e2"), spec("e1")], policy="prefix_affinity",
                               block_chars=32)).apply()  # fmt: skip
    assert policy.live_counts == [0, 0]  # on again: counting from now
