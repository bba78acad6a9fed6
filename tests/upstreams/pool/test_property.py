"""Property: prefix_affinity, behind the pool, never picks an ejected endpoint and never picks
one its load guard rules out (unless it is the least loaded), whatever the loads, ejections and
conversations."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hybrid_gateway.config import ChannelConfig
from hybrid_gateway.errors import UpstreamUnavailable
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.upstreams.pool.endpoint import Request
from hybrid_gateway.upstreams.pool.health import HealthState
from hybrid_gateway.upstreams.pool.pool import EndpointPool
from hybrid_gateway.upstreams.pool.prefix import PrefixAffinity
from hybrid_gateway.upstreams.pool.settings import BalancingConfig
from tests.upstreams.pool.helpers import conversation, endpoints

REL = 1.25
SYSTEMS = ["You answer questions about trains. " * 8, "You write SQL for analysts. " * 8]

step = st.tuples(
    st.integers(0, 7),  # endpoint to change
    st.sampled_from(["eject", "restore", "load"]),
    st.integers(0, 40),  # its new in-flight count
    st.integers(0, 1),  # system prompt of the next request
    st.integers(0, 3),  # how many turns it has
)


@given(
    n=st.integers(2, 8),
    steps=st.lists(step, min_size=1, max_size=40),
    guard=st.sampled_from([0.0, 0.5, 8.0]),  # balance_abs
    slack=st.sampled_from([0.0, 0.2, 1.0]),  # match_slack
)
def test_prefix_affinity_never_picks_an_ejected_endpoint_nor_breaks_its_load_guard(
    n: int, steps: list[tuple[int, str, int, int, int]], guard: float, slack: float
) -> None:
    clock = ManualClock()
    eps = endpoints(n, clock)
    for e in eps:
        e.max_concurrency = 1000
    config = BalancingConfig(policy="prefix_affinity", block_chars=32, balance_abs=guard,
                             balance_rel=REL, match_threshold=0.3, match_slack=slack)  # fmt: skip
    channel = ChannelConfig(base_url="http://127.0.0.1:9/v1", model="m")
    pool = EndpointPool("c", channel, eps, PrefixAffinity(config, n), clock)
    for which, action, load, system, turns in steps:
        target = eps[which % n]
        if action == "eject":
            target.health.failure()  # threshold 1: ejected
        elif action == "restore":
            target.health.check_passed()
        else:
            target.in_flight = load
        body = conversation(SYSTEMS[system], *[f"turn {t} " * 6 for t in range(turns + 1)])
        available = [e for e in eps if e.health.state is not HealthState.EJECTED]
        if not available:
            try:
                pool.pick(Request(body), set())
            except UpstreamUnavailable as exc:
                assert exc.code == "upstream_connection_error"
                continue
            raise AssertionError("picked with every endpoint ejected")
        chosen, _ = pool.pick(Request(body), set())
        assert chosen.health.state is not HealthState.EJECTED
        loads = [e.in_flight for e in available]
        mean = sum(loads) / len(loads)
        # the guard allows it, or nothing the guard allows held the prefix: the least loaded
        assert (
            chosen.in_flight - mean <= guard
            or chosen.in_flight <= REL * mean
            or chosen.in_flight == min(loads)
        )
