"""Balancing policies: which of a channel's available endpoints takes a request, and why.

Each policy is a small object with ``choose(candidates, request) -> Choice``; the candidates
are the endpoints that may take the request now (healthy, or taking their probe; not already
failed by this request when another exists), never empty.  ``POLICIES`` maps the config's
``balancing.policy`` to a factory.  ``prefix_affinity`` lives in ``prefix.py``.

A reload that changes the pool's endpoints (``resize.py``) numbers them again (endpoint i at
position i) and calls ``reindex`` with the old-to-new index of each endpoint kept: what the
policy knew of a removed endpoint goes, what it knew of a kept one follows it.
"""

from __future__ import annotations

import bisect
import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Protocol

from hybrid_gateway.upstreams.pool.endpoint import Endpoint, Request
from hybrid_gateway.upstreams.pool.settings import BalancingConfig

__all__ = [
    "POLICIES", "Choice", "LeastOutstanding", "Policy", "RoundRobin", "Session", "least_loaded",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Choice:
    endpoint: Endpoint
    # ``key=value`` pairs for x-gateway-route ("" when the policy has nothing to add)
    reason: str = ""


class Policy(Protocol):
    name: str

    def choose(self, candidates: Sequence[Endpoint], request: Request) -> Choice: ...

    def forget(self, endpoint: Endpoint) -> None:
        """``endpoint`` was ejected: whatever the policy learnt about its cache is stale."""
        ...

    def reindex(
        self, endpoints: Sequence[Endpoint], moved: Mapping[int, int], config: BalancingConfig
    ) -> None:
        """The pool's endpoints are now ``endpoints`` (a reload); ``moved`` maps each kept
        endpoint's old index to its new one; ``config``: the balancing knobs now in force."""
        ...


_LOAD = attrgetter("load")


def least_loaded(candidates: Sequence[Endpoint], start: int = 0) -> Endpoint:
    """The candidate with the least in-flight load per weight; ties go to the first from
    ``start`` on (callers rotate it, so idle endpoints share new work evenly)."""
    start %= len(candidates)
    ordered = [*candidates[start:], *candidates[:start]] if start else candidates
    best: Endpoint = min(ordered, key=_LOAD)
    return best


class RoundRobin:
    """Smooth weighted round robin (nginx's): over a window of sum(weights) picks, each
    endpoint gets its weight's share, interleaved rather than in runs."""

    name = "round_robin"

    def __init__(self, endpoints: Sequence[Endpoint]) -> None:
        self._start(endpoints)

    def _start(self, endpoints: Sequence[Endpoint]) -> None:
        self._current = [0.0] * len(endpoints)
        # equal weights and every endpoint a candidate: plain rotation, the same sequence
        self._uniform = len({e.weight for e in endpoints}) <= 1
        self._next = 0

    def reindex(
        self, endpoints: Sequence[Endpoint], moved: Mapping[int, int], config: BalancingConfig
    ) -> None:
        """The weighted rotation starts again over the new set (one window is all it holds)."""
        self._start(endpoints)

    def choose(self, candidates: Sequence[Endpoint], request: Request) -> Choice:
        n = len(candidates)
        if self._uniform and n == len(self._current):
            i = self._next
            self._next = (i + 1) % n
            return Choice(candidates[i])
        current = self._current
        total = 0.0
        best = candidates[0]
        for candidate in candidates:
            current[candidate.index] += candidate.weight
            total += candidate.weight
            if current[candidate.index] > current[best.index]:
                best = candidate
        current[best.index] -= total
        return Choice(best)

    def forget(self, endpoint: Endpoint) -> None:
        pass


class LeastOutstanding:
    """Power of two choices: two random candidates, the one with less in-flight load per
    weight (then the lower latency estimate) wins.  Near least-loaded balance without every
    gateway worker herding onto the same idle endpoint."""

    name = "least_outstanding"

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def choose(self, candidates: Sequence[Endpoint], request: Request) -> Choice:
        n = len(candidates)
        if n == 1:
            return Choice(candidates[0], f"in_flight={candidates[0].in_flight}")
        i = self._rng.randrange(n)
        j = self._rng.randrange(n - 1)
        a, b = candidates[i], candidates[j + 1 if j >= i else j]
        best = a if (a.load, a.ewma_s) <= (b.load, b.ewma_s) else b
        return Choice(best, f"in_flight={best.in_flight}")

    def forget(self, endpoint: Endpoint) -> None:
        pass

    def reindex(
        self, endpoints: Sequence[Endpoint], moved: Mapping[int, int], config: BalancingConfig
    ) -> None:
        pass  # it keeps nothing per endpoint: the loads are the endpoints' own


_VNODES = 64  # ring points per unit of weight


def _stable_hash(text: str) -> int:
    """The same on every gateway process (Python's str hash is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class Session:
    """Sticky by session key (``user``, or a header the config names): a consistent-hash ring,
    so when an endpoint leaves, only its own sessions move, each to the next point on the ring.
    Requests without a key go to ``fallback``."""

    name = "session"

    def __init__(self, endpoints: Sequence[Endpoint], fallback: Policy) -> None:
        self._fallback = fallback
        self._ring(endpoints)

    def _ring(self, endpoints: Sequence[Endpoint]) -> None:
        points = sorted(
            (_stable_hash(f"{endpoint.name}#{v}"), endpoint.index)
            for endpoint in endpoints
            for v in range(max(1, round(_VNODES * endpoint.weight)))
        )
        self._hashes = [h for h, _ in points]
        self._owners = [index for _, index in points]
        self._endpoints = len(endpoints)

    def reindex(
        self, endpoints: Sequence[Endpoint], moved: Mapping[int, int], config: BalancingConfig
    ) -> None:
        """The ring again: its points hang on names and weights, so a kept endpoint keeps its
        sessions but for those an added endpoint's points now catch; a removed one's move to
        the next point, as when it is ejected."""
        self._ring(endpoints)
        self._fallback.reindex(endpoints, moved, config)

    def choose(self, candidates: Sequence[Endpoint], request: Request) -> Choice:
        if request.session is None:
            choice = self._fallback.choose(candidates, request)
            return Choice(choice.endpoint, "session=none")
        start = bisect.bisect_left(self._hashes, _stable_hash(request.session))
        n = len(self._hashes)
        home = self._owners[start % n]
        if len(candidates) == self._endpoints and candidates[home].index == home:
            return Choice(candidates[home])  # every endpoint a candidate: its home
        by_index = {candidate.index: candidate for candidate in candidates}
        for step in range(n):
            owner = by_index.get(self._owners[(start + step) % n])
            if owner is not None:
                return Choice(owner, "session=moved" if step and self._moved(start, step) else "")
        return Choice(candidates[0])  # unreachable: every candidate has ring points

    def _moved(self, start: int, step: int) -> bool:
        """Did the walk pass a point of another endpoint (the session's home is out)?"""
        n = len(self._hashes)
        return any(
            self._owners[(start + k) % n] != self._owners[(start + step) % n] for k in range(step)
        )

    def forget(self, endpoint: Endpoint) -> None:
        pass


PolicyFactory = Callable[[BalancingConfig, Sequence[Endpoint], random.Random], Policy]


def _round_robin(_: BalancingConfig, endpoints: Sequence[Endpoint], __: random.Random) -> Policy:
    return RoundRobin(endpoints)


def _least(_: BalancingConfig, __: Sequence[Endpoint], rng: random.Random) -> Policy:
    return LeastOutstanding(rng)


def _session(_: BalancingConfig, endpoints: Sequence[Endpoint], rng: random.Random) -> Policy:
    return Session(endpoints, LeastOutstanding(rng))


def _prefix(config: BalancingConfig, endpoints: Sequence[Endpoint], _: random.Random) -> Policy:
    from hybrid_gateway.upstreams.pool.prefix import PrefixAffinity

    return PrefixAffinity(config, len(endpoints))


POLICIES: dict[str, PolicyFactory] = {
    "round_robin": _round_robin,
    "least_outstanding": _least,
    "prefix_affinity": _prefix,
    "session": _session,
}
