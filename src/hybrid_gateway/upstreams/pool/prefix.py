"""``prefix_affinity``: send a conversation where its prefix is probably still in the KV cache.

The rendered conversation is cut in blocks and hashed as a chain (``chain.py``: equal hashes
mean equal prefixes; a memo hashes only the messages it has not seen, so each turn of a
conversation costs its new text).  The policy remembers which endpoints were sent each block
hash (one LRU of at most ``max_blocks`` hashes over all endpoints, each with a bit mask: bounded
memory; two generations, the older dropped when the newer holds half: an LRU to within a factor
2; a dropped generation is freed a few blocks per call, ``fading.py``) and walks the request's
chain while some candidate holds it, noting how deep each candidate's match goes.  The endpoints
of the longest match, and of every match at most ``match_slack`` of the request's blocks
shorter, form one group, and the least loaded of them takes the request (a tie keeps the longer
match), if the longest match covers ``match_threshold`` of its blocks and the load guard allows;
if the guard rules it out, the endpoint of the next shorter match still above the threshold (a
shared system prompt, say) that the guard allows; failing those, or below the threshold, the
least loaded candidate.  Either way the chosen endpoint is recorded as holding every block of
the request (as SGLang's cache_aware router does).  So a conversation the guard once moved has
two homes, the second behind by a few messages, and its next turns go to whichever is less busy:
balance for the prefill of a few messages instead of the whole conversation.

Load guard: an endpoint is passed over when its in-flight count n is both more than
``balance_abs`` above the candidates' mean and more than ``balance_rel`` times it:
``n - mean > abs and n > rel * mean``.  SGLang's cache_aware guard has the same form against
the least loaded worker, at 64 / 1.5; with a few requests in flight per server some server is
idle at most instants, so a guard against the least loaded either never trips (a large
``balance_abs``) or moves most conversations off their cache (a small one).  Against the mean,
the defaults (0.25 / 1.25) trip at 2 in flight when the mean is 1.5, at 3 when it is 2 and at
126 when it is 100; 1 / 1.5 trips at 4 (mean 2) and 151, keeping more conversations home and
the servers' loads less even (docs/replicas.md, *Load imbalance*, has the trade measured).

The walk, the masks and the guard are plain ints; the mean, needed only when the target has
more than ``balance_abs`` in flight, is the pool's running total (``PoolLoad``) when every
endpoint is a candidate, else one C-level sum.  An ejected endpoint is forgotten
(its bit cleared in one pass over the LRU): its server may have restarted cold.  A reload that
changes the endpoints (``reindex``) moves each kept endpoint's bit to its new index and drops
removed endpoints' bits, and the blocks no endpoint holds any more, in one pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter

from hybrid_gateway.upstreams.pool.chain import ChainMemo, block_chain, render_conversation
from hybrid_gateway.upstreams.pool.endpoint import Endpoint, Request
from hybrid_gateway.upstreams.pool.fading import Fading
from hybrid_gateway.upstreams.pool.policies import Choice, least_loaded
from hybrid_gateway.upstreams.pool.settings import BalancingConfig

__all__ = ["MEMO_CHARS", "PrefixAffinity", "block_chain", "render_conversation"]

_IN_FLIGHT = attrgetter("_in_flight")  # (the plain slot: the property costs more than the sum)

# Text the chain memo keeps (recent conversations' messages, about this many bytes).
MEMO_CHARS = 8_000_000


class PrefixAffinity:
    name = "prefix_affinity"

    def __init__(self, config: BalancingConfig, endpoints: int, memo_chars: int = MEMO_CHARS):
        self._tune(config, endpoints)
        self._memo = ChainMemo(config.block_chars, memo_chars)
        # block hash -> bit mask of the endpoints sent it (bit i: endpoint index i), in two
        # generations: a block used again moves to the young one; when the young one holds
        # max_blocks / 2, the old one is dropped and the young one becomes old.  Ints only, so
        # the garbage collector sees two dicts, not one object per block.  Their keys never
        # overlap (a block moves, the swap empties the young one).
        self._young: dict[int, int] = {}
        self._old: dict[int, int] = {}
        # dropped old generations, freed two blocks per block added (a generation is filled by
        # max_blocks / 2 additions, so the one before it is gone by then)
        self._fading = Fading()
        self._turn = 0

    def _tune(self, config: BalancingConfig, endpoints: int) -> None:
        self._threshold = config.match_threshold
        self._max_blocks = config.max_blocks
        self._abs, self._rel = config.balance_abs, config.balance_rel
        self._slack = config.match_slack
        self._endpoints = endpoints
        self._all = (1 << endpoints) - 1

    def reindex(
        self, endpoints: Sequence[Endpoint], moved: Mapping[int, int], config: BalancingConfig
    ) -> None:
        """Each block's mask with kept endpoints' bits moved, removed ones' cleared; a block
        left with none is dropped (the masks repeat: each distinct one is mapped once)."""
        mapped: dict[int, int] = {}
        for generation in (self._young, self._old):
            for block, mask in list(generation.items()):
                new = mapped.get(mask)
                if new is None:
                    new = mapped[mask] = _move_bits(mask, moved)
                if new:
                    generation[block] = new
                else:
                    del generation[block]
        self._tune(config, len(endpoints))  # (block_chars is the same: resize.py)
        half = self._max_blocks // 2  # a smaller max_blocks holds at once
        if len(self._young) > half:
            self._old, self._young = self._young, {}
        if len(self._old) > half:
            self._old = dict(list(self._old.items())[len(self._old) - half :])

    @property
    def blocks(self) -> int:
        return len(self._young) + len(self._old)

    def chain(self, request: Request) -> tuple[int, ...]:
        if request.chain is None:
            request.chain = self._memo.chain(request.body)
        return request.chain

    def choose(self, candidates: Sequence[Endpoint], request: Request) -> Choice:
        chain = self.chain(request)
        levels, noted = self._matches(candidates, chain)
        size = len(chain)
        top = levels[-1][0] / size if levels else 0.0
        if top < self._threshold:
            spread = self._spread(candidates)
            self._remember(spread, chain)
            return Choice(spread, f"match={top:.2f}; least_loaded")
        near = max(self._threshold, top - self._slack)  # these shares count as the longest
        mean = -1.0  # the candidates' mean in-flight count, once needed
        guarded = False
        target: Endpoint | None = None
        own = 0  # the target's match, in blocks
        for i in range(len(levels) - 1, -1, -1):  # the longest match first, then shorter ones
            depth, level = levels[i]
            if depth / size < self._threshold:
                break
            holders = _holders(candidates, level)
            best = holders[0] if len(holders) == 1 else least_loaded(holders)
            if target is None or best.load < target.load:  # (a tie keeps the longer match)
                target, own = best, depth
            if depth / size >= near and i and levels[i - 1][0] / size >= near:
                continue  # a match within match_slack of the longest: one group with it
            if target.in_flight > self._abs:  # (else within balance_abs of any mean)
                if mean < 0:
                    mean = self._mean(candidates)
                if not self._guard_allows(target.in_flight, mean):
                    guarded, target = True, None
                    continue
            if own == levels[-1][0]:  # it holds the longest match
                self._remember(target, chain, noted)
                return Choice(target, f"match={top:.2f}")
            self._remember(target, chain)
            if guarded:
                return Choice(target, f"match={top:.2f}; guard=load")
            return Choice(target, f"match={top:.2f}; near={own / size:.2f}")
        spread = self._spread(candidates)
        self._remember(spread, chain)
        return Choice(spread, f"match={top:.2f}; guard=load")

    def _spread(self, candidates: Sequence[Endpoint]) -> Endpoint:
        """The least loaded candidate; ties rotate over the requests placed this way (new
        prefixes), so idle endpoints take new conversations in turn."""
        self._turn += 1
        return least_loaded(candidates, self._turn)

    def forget(self, endpoint: Endpoint) -> None:
        """Clear the endpoint's bit everywhere: one pass over the blocks (an ejection is rare)."""
        keep = ~(1 << endpoint.index)
        for blocks in (self._young, self._old):
            for block, mask in blocks.items():
                blocks[block] = mask & keep

    def _mean(self, candidates: Sequence[Endpoint]) -> float:
        """The candidates' mean in-flight count: their pool's running total when every endpoint
        of the pool is a candidate (candidates come from one pool), else a sum over them."""
        load = candidates[0].pool_load
        if load.endpoints == len(candidates):
            return load.in_flight / len(candidates)
        total: int = sum(map(_IN_FLIGHT, candidates))
        return total / len(candidates)

    def _guard_allows(self, in_flight: int, mean: float) -> bool:
        """May an endpoint with ``in_flight`` requests take one more, the candidates having
        ``mean`` in flight on average?"""
        return not (in_flight - mean > self._abs and in_flight > self._rel * mean)

    def _matches(
        self, candidates: Sequence[Endpoint], chain: tuple[int, ...]
    ) -> tuple[list[tuple[int, int]], int]:
        """How much of ``chain`` each candidate holds: ``(depth, bits)`` pairs by increasing
        depth (the candidates in ``bits`` hold exactly ``depth`` leading blocks; the last pair:
        the longest match), and how many leading blocks of the longest match are in the young
        generation (the holders' bits already set there)."""
        if not chain:
            return [], 0
        wanted = self._all
        if len(candidates) < self._endpoints:  # some are out: only candidates count
            wanted = 0
            for candidate in candidates:
                wanted |= 1 << candidate.index
        young, old = self._young.get, self._old.get
        levels: list[tuple[int, int]] = []
        mask, matched, in_young = wanted, 0, -1
        for block in chain:
            held = young(block)
            if held is None:
                if in_young < 0:
                    in_young = matched
                held = old(block, 0)
            still = held & mask
            if still != mask:
                if matched:
                    levels.append((matched, mask & ~still))
                if not still:
                    break
                mask = still
            matched += 1
        else:
            levels.append((matched, mask))
        return levels, matched if in_young < 0 else in_young

    def _remember(self, endpoint: Endpoint, chain: tuple[int, ...], start: int = 0) -> None:
        """Note ``endpoint`` as holding every block of ``chain`` (its first ``start`` blocks:
        already noted, in the young generation)."""
        young, bit = self._young, 1 << endpoint.index
        get = young.get
        half = self._max_blocks // 2
        added = 0
        for block in chain[start:] if start else chain:
            mask = get(block)
            if mask is not None:
                if not mask & bit:
                    young[block] = mask | bit
                continue
            mask = self._old.pop(block, 0)
            if len(young) >= half:  # the old generation goes; the young one is old now
                self._fading.drop(self._old)
                self._old, self._young = young, {}
                young = self._young
                get = young.get
            young[block] = mask | bit
            added += 1
        if added:
            self._fading.step(2 * added)


def _move_bits(mask: int, moved: Mapping[int, int]) -> int:
    out = 0
    for old, new in moved.items():
        if mask >> old & 1:
            out |= 1 << new
    return out


def _holders(candidates: Sequence[Endpoint], alive: int) -> list[Endpoint]:
    """The candidates whose bit is set in ``alive`` (walks the set bits, not the candidates,
    when candidate i is endpoint i)."""
    holders = []
    rest = alive
    while rest:
        low = rest & -rest
        i = low.bit_length() - 1
        if i >= len(candidates) or candidates[i].index != i:
            return [e for e in candidates if alive >> e.index & 1]
        holders.append(candidates[i])
        rest ^= low
    return holders
