"""prefix_affinity's live conversations: which endpoint each recent conversation calls home.

A conversation's later turns follow its first one (their prefix is cached there), so the
endpoint a new conversation is placed on takes on all of its future turns: the in-flight
count at that instant says nothing of them.  This table counts, per endpoint, the
conversations whose last turn was placed there within ``live_window_s``, so a new one can go
where the fewest are under way.

Which conversation a request belongs to is read off its block chain.  Each turn resends the
previous one, so the previous turn's chain is a prefix of this one's and, on the endpoint that
answered it, the longest known prefix ends with the previous turn's last whole block.  The
table remembers each request's last block (its *end*) with its conversation's id (the end of
its first turn): a request whose longest known prefix ends on a remembered end continues that
conversation; one whose longest prefix ends anywhere else (mid-way through a shared system
prompt, or nothing known) is a new conversation.  A first turn that lies wholly inside a
prefix other conversations share (a short question after a long shared system prompt, no
whole block of its own) has no end of its own: such conversations count as one.

Bounded: the ends in two generations of ``capacity`` (an LRU to within a factor 2, as the
block table), the live conversations in touch order, at most ``capacity`` of them, expired
from the oldest on as each request is placed (amortised O(1)).  Time is the pool's clock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence

from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.upstreams.pool.endpoint import Endpoint

__all__ = ["LiveConversations"]


class LiveConversations:
    def __init__(self, endpoints: int, window_s: float, capacity: int, clock: Clock) -> None:
        self._clock = clock
        self._window = window_s
        self._capacity = capacity
        # end block hash -> conversation id (the end of its first turn), two generations
        self._young: dict[int, int] = {}
        self._old: dict[int, int] = {}
        # conversation id -> (home endpoint index, when its last turn was placed); oldest first
        self._live: OrderedDict[int, tuple[int, float]] = OrderedDict()
        self.counts = [0] * endpoints  # live conversations per endpoint index
        # the same per unit of weight (what placement compares: one C-level min), and the
        # weights (each endpoint's as of its last note, or the last reindex)
        self._scores = [0.0] * endpoints
        self._weights = [1.0] * endpoints

    def tune(self, window_s: float, capacity: int) -> None:
        self._window, self._capacity = window_s, capacity
        self._expire(self._clock.now())

    def conversation(self, chain: tuple[int, ...], depth: int) -> int | None:
        """The id of the conversation a request continues (its longest known prefix: the
        first ``depth`` blocks of ``chain``), or None: a new conversation."""
        if not depth:
            return None
        end = chain[depth - 1]
        found = self._young.get(end)
        if found is None:
            found = self._old.get(end)
        return found

    def note(self, conversation: int | None, chain: tuple[int, ...], endpoint: Endpoint) -> None:
        """The request (of ``conversation``, None: a new one) was placed on ``endpoint``: its
        conversation is live there from now on, and its end leads to it."""
        end = chain[-1]
        if conversation is None:
            conversation = end
        young = self._young
        if len(young) >= self._capacity and end not in young:
            self._old, self._young = young, {}
            young = self._young
        young[end] = conversation
        live, now, index = self._live, self._clock.now(), endpoint.index
        before = live.pop(conversation, None)
        live[conversation] = (index, now)
        if before is None or before[0] != index:  # (else a turn at home: counts unchanged)
            if before is not None:
                self._add(before[0], -1)
            self._weights[index] = endpoint.weight
            self._add(index, 1)
        self._expire(now)

    def _add(self, index: int, change: int) -> None:
        count = self.counts[index] = self.counts[index] + change
        self._scores[index] = count / self._weights[index]

    def _expire(self, now: float) -> None:
        live = self._live
        horizon = now - self._window
        while live:
            endpoint, at = next(iter(live.values()))
            if at >= horizon and len(live) <= self._capacity:
                break
            live.popitem(last=False)
            self._add(endpoint, -1)

    def scores(self) -> list[float]:
        """Live conversations per unit of weight, per endpoint index, as of now."""
        self._expire(self._clock.now())
        return self._scores

    def current(self) -> list[int]:
        """Live conversations per endpoint index, as of now."""
        self._expire(self._clock.now())
        return self.counts

    def forget(self, endpoint: int) -> None:
        """``endpoint`` was ejected: its conversations are homeless (their next turns, not
        matching there any more, are placed as new ones).  One pass (an ejection is rare)."""
        for conversation, (home, _) in list(self._live.items()):
            if home == endpoint:
                del self._live[conversation]
        self.counts[endpoint], self._scores[endpoint] = 0, 0.0

    def reindex(self, moved: Mapping[int, int], endpoints: Sequence[Endpoint]) -> None:
        """Kept endpoints' conversations follow them to their new index; removed ones' go."""
        counts = [0] * len(endpoints)
        for conversation, (home, at) in list(self._live.items()):
            new = moved.get(home)
            if new is None:
                del self._live[conversation]
            else:
                self._live[conversation] = (new, at)  # (an existing key keeps its place)
                counts[new] += 1
        self.counts = counts
        self._weights = [e.weight for e in endpoints]
        self._scores = [n / w for n, w in zip(counts, self._weights, strict=True)]
