"""``prefix_affinity``: send a conversation where its prefix is probably still in the KV cache.

The rendered conversation (each message's role and text, in order) is cut in blocks of
``block_chars`` characters; block i's hash covers blocks 0..i (a hash chain), so equal hashes
mean equal prefixes.  The policy remembers which endpoints were sent each block hash (one LRU
of at most ``max_blocks`` hashes over all endpoints, each with a bit mask: bounded memory;
two generations, the older dropped when the newer holds half: an LRU to within a factor 2)
and walks the request's chain while some candidate holds it.  The longest match's endpoint
(the least loaded of those tied) takes the request if the match covers ``match_threshold`` of
its blocks and the load guard allows; otherwise the least loaded candidate takes it.  Either way
the chosen endpoint is recorded as holding every block of the request (as SGLang's cache_aware
router does).

Load guard: the prefix's endpoint is passed over when its in-flight count is both more than
``balance_abs`` above and more than ``balance_rel`` times the least loaded candidate's (SGLang's
defaults: 64 and 1.5).  An ejected endpoint is forgotten (its bit cleared in one pass over the
LRU): its server may have restarted cold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hybrid_gateway.upstreams.pool.endpoint import Endpoint, Request
from hybrid_gateway.upstreams.pool.policies import Choice, least_loaded
from hybrid_gateway.upstreams.pool.settings import BalancingConfig

__all__ = ["PrefixAffinity", "block_chain", "render_conversation"]


def render_conversation(body: object) -> str:
    """The conversation as a server's chat template would see its order: role, then text."""
    if not isinstance(body, Mapping):
        return ""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    parts: list[str] = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        parts.append(f"<|{message.get('role')}|>")
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):  # content parts: their text, in order
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "".join(parts)


def block_chain(text: str, block_chars: int) -> list[int]:
    """Hash of each full block together with every block before it (a partial tail is left
    out: a server caches whole blocks only)."""
    chain: list[int] = []
    previous = 0
    for start in range(0, len(text) - block_chars + 1, block_chars):
        previous = hash((previous, text[start : start + block_chars]))
        chain.append(previous)
    return chain


class PrefixAffinity:
    name = "prefix_affinity"

    def __init__(self, config: BalancingConfig, endpoints: int) -> None:
        self._block_chars = config.block_chars
        self._threshold = config.match_threshold
        self._max_blocks = config.max_blocks
        self._abs, self._rel = config.balance_abs, config.balance_rel
        self._endpoints = endpoints
        # block hash -> bit mask of the endpoints sent it (bit i: endpoint index i), in two
        # generations: a block used again moves to the young one; when the young one holds
        # max_blocks / 2, the old one is dropped and the young one becomes old.  Ints only, so
        # the garbage collector sees two dicts, not one object per block.
        self._young: dict[int, int] = {}
        self._old: dict[int, int] = {}
        self._turn = 0

    @property
    def blocks(self) -> int:
        return len(self._young) + len(self._old)

    def chain(self, request: Request) -> list[int]:
        if request.chain is None:
            request.chain = block_chain(render_conversation(request.body), self._block_chars)
        return request.chain

    def choose(self, candidates: Sequence[Endpoint], request: Request) -> Choice:
        chain = self.chain(request)
        holders, matched = self._longest_match(candidates, chain)
        match = matched / len(chain) if chain else 0.0
        if holders and match >= self._threshold:
            target = least_loaded(holders)
            least = least_loaded(candidates).in_flight
            if self._guard_allows(target, least):
                self._remember(target, chain)
                return Choice(target, f"match={match:.2f}")
            spread = self._spread(candidates)
            self._remember(spread, chain)
            return Choice(spread, f"match={match:.2f}; guard=load")
        spread = self._spread(candidates)
        self._remember(spread, chain)
        return Choice(spread, f"match={match:.2f}; least_loaded")

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

    def _mask(self, block: int) -> int:
        mask = self._young.get(block)
        return mask if mask is not None else self._old.get(block, 0)

    def _guard_allows(self, target: Endpoint, least: int) -> bool:
        """``least``: the fewest requests in flight on any candidate."""
        over = target.in_flight - least
        return not (over > self._abs and target.in_flight > self._rel * least)

    def _longest_match(
        self, candidates: Sequence[Endpoint], chain: list[int]
    ) -> tuple[list[Endpoint], int]:
        """The candidates holding the longest prefix of ``chain``, and its length in blocks."""
        alive = self._mask(chain[0]) if chain else 0
        if alive and len(candidates) < self._endpoints:  # some are out: only candidates count
            wanted = 0
            for candidate in candidates:
                wanted |= 1 << candidate.index
            alive &= wanted
        if not alive:
            return [], 0
        matched = 1
        mask = self._mask
        for block in chain[1:]:
            still = mask(block) & alive
            if not still:
                break
            alive, matched = still, matched + 1
        return [e for e in candidates if alive >> e.index & 1], matched

    def _remember(self, endpoint: Endpoint, chain: list[int]) -> None:
        young, old, bit = self._young, self._old, 1 << endpoint.index
        half = self._max_blocks // 2
        for block in chain:
            mask = young.get(block)
            if mask is None:
                mask = old.pop(block, 0)
                if len(young) >= half:  # the old generation goes; the young one is old now
                    old, young = young, {}
                    self._old, self._young = old, young
            young[block] = mask | bit
