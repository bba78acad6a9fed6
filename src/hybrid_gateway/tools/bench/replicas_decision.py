"""What one balancing decision costs: ``EndpointPool.pick`` at 64 endpoints, per policy.

In process, no network: a pool of 64 endpoints (clients built, never connected) with random
in-flight counts, asked to place the conversations of the bench's workload turn by turn, as
the gateway does for each attempt (the prefix chain is computed inside, per request, from a
body parsed afresh: nothing of an earlier request's objects is shared, as in the gateway).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import orjson

from hybrid_gateway.config import ChannelConfig
from hybrid_gateway.resilience.clock import MonotonicClock
from hybrid_gateway.tools.workload.conversations import Conversation
from hybrid_gateway.upstreams.pool.build import build_pool
from hybrid_gateway.upstreams.pool.endpoint import Request

__all__ = ["DecisionCost", "decision_costs"]


@dataclass(frozen=True, slots=True)
class DecisionCost:
    policy: str
    endpoints: int
    decisions: int
    p50_us: float  # wall clock: includes time the OS gave the CPU to other processes
    p99_us: float
    cpu_p50_us: float  # this thread's CPU time: what the decision itself costs
    cpu_p99_us: float
    prompt_chars_p50: int
    # each decision replayed on fresh pools: its least CPU time over the replays (the raw
    # figures above pool every replay's samples, with the interference of other processes)
    replays: int
    best_p50_us: float
    best_p99_us: float


def _bodies(conversations: list[Conversation], count: int) -> list[dict[str, object]]:
    bodies: list[dict[str, object]] = []
    for conversation in conversations:
        answers: list[str] = []
        for turn in range(len(conversation.questions)):
            bodies.append({"model": "light", "user": conversation.id,
                           "messages": conversation.messages(turn, answers)})  # fmt: skip
            answers.append("An answer of a few sentences, as the emulator gives. " * 4)
            if len(bodies) >= count:
                return bodies
    return bodies


def _chars(body: dict[str, object]) -> int:
    messages = body["messages"]
    assert isinstance(messages, list)
    return sum(len(str(m["content"])) for m in messages)


def _cost(
    policy: str, endpoints: int, bodies: list[dict[str, object]], replays: int
) -> DecisionCost:
    config = ChannelConfig.model_validate({
        "model": "m", "balancing": {"policy": policy},
        "endpoints": [{"url": f"http://127.0.0.1:{10000 + i}/v1"} for i in range(endpoints)],
    })  # fmt: skip
    raws = [orjson.dumps(body) for body in bodies]
    wall: list[float] = []
    cpu: list[list[float]] = [[] for _ in raws]
    for _ in range(replays):
        pool = build_pool("bench", config, api_key=None, ca_file=None, clock=MonotonicClock(),
                          listeners=[], rng=random.Random(0))  # fmt: skip
        rng = random.Random(1)
        for raw, costs in zip(raws, cpu, strict=True):
            body = orjson.loads(raw)  # parsed afresh, as the gateway parses each request
            for endpoint in pool.endpoints:
                endpoint.in_flight = rng.randrange(0, 32)
            request = Request(body, str(body["user"]))
            started, started_cpu = time.perf_counter(), time.thread_time()
            pool.pick(request, set())
            costs.append(time.thread_time() - started_cpu)
            wall.append(time.perf_counter() - started)
    chars = sorted(_chars(body) for body in bodies)
    every = [c for costs in cpu for c in costs]
    best = [min(costs) for costs in cpu]
    return DecisionCost(
        policy, endpoints, len(raws), _us(wall, 0.5), _us(wall, 0.99), _us(every, 0.5),
        _us(every, 0.99), chars[len(chars) // 2], replays, _us(best, 0.5), _us(best, 0.99),
    )  # fmt: skip


def _us(seconds: list[float], q: float) -> float:
    ordered = sorted(seconds)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1e6, 2)


def decision_costs(
    conversations: list[Conversation], policies: list[str], *, endpoints: int = 64,
    decisions: int = 3000, replays: int = 5,
) -> list[DecisionCost]:  # fmt: skip
    bodies = _bodies(conversations, decisions)
    return [_cost(policy, endpoints, bodies, replays) for policy in policies]
