"""``prefix_affinity``: send a conversation where its prefix is probably still in the KV cache.

The rendered conversation (each message's role and text, in order) is cut in blocks of
``block_chars`` characters; block i's hash covers blocks 0..i (a hash chain), so equal hashes
mean equal prefixes.  The policy remembers which endpoints were sent each block hash (one LRU
of at most ``max_blocks`` hashes over all endpoints: bounded memory) and walks the request's
chain while some candidate holds it.  The longest match's endpoint (the least loaded of those
tied) takes the request if the match covers ``match_threshold`` of its blocks and the load
guard allows; otherwise the least loaded candidate takes it.  Either way the chosen endpoint
is recorded as holding every block of the request (as SGLang's cache_aware router does).

Load guard: the prefix's endpoint is passed over when its in-flight count is both more than
``balance_abs`` above and more than ``balance_rel`` times the least loaded candidate's (SGLang's
defaults: 64 and 1.5).  An ejected endpoint is forgotten: its server may have restarted cold.
"""

from __future__ import annotations

from collections import OrderedDict
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
        # block hash -> {endpoint index: that endpoint's epoch when it was sent the block}
        self._blocks: OrderedDict[int, dict[int, int]] = OrderedDict()
        self._epochs = [0] * endpoints  # bumped when an endpoint is forgotten
        self._turn = 0

    @property
    def blocks(self) -> int:
        return len(self._blocks)

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
            least = least_loaded(candidates)
            if self._guard_allows(target, least):
                self._remember(target, chain)
                return Choice(target, f"match={match:.2f}")
            least = self._spread(candidates)
            self._remember(least, chain)
            return Choice(least, f"match={match:.2f}; guard=load")
        least = self._spread(candidates)
        self._remember(least, chain)
        return Choice(least, f"match={match:.2f}; least_loaded")

    def _spread(self, candidates: Sequence[Endpoint]) -> Endpoint:
        """The least loaded candidate; ties rotate over the requests placed this way (new
        prefixes), so idle endpoints take new conversations in turn."""
        self._turn += 1
        return least_loaded(candidates, self._turn)

    def forget(self, endpoint: Endpoint) -> None:
        self._epochs[endpoint.index] += 1

    def _guard_allows(self, target: Endpoint, least: Endpoint) -> bool:
        over = target.in_flight - least.in_flight
        return not (over > self._abs and target.in_flight > self._rel * least.in_flight)

    def _longest_match(
        self, candidates: Sequence[Endpoint], chain: list[int]
    ) -> tuple[list[Endpoint], int]:
        """The candidates holding the longest prefix of ``chain``, and its length in blocks."""
        epochs, blocks = self._epochs, self._blocks
        alive: list[Endpoint] = list(candidates)
        matched = 0
        for block in chain:
            owners = blocks.get(block)
            if owners is None:
                break
            still = [e for e in alive if owners.get(e.index) == epochs[e.index]]
            if not still:
                break
            alive, matched = still, matched + 1
        return (alive if matched else []), matched

    def _remember(self, endpoint: Endpoint, chain: list[int]) -> None:
        blocks, index, epoch = self._blocks, endpoint.index, self._epochs[endpoint.index]
        for block in chain:
            owners = blocks.get(block)
            if owners is None:
                blocks[block] = {index: epoch}
            else:
                owners[index] = epoch
                blocks.move_to_end(block)
        while len(blocks) > self._max_blocks:
            blocks.popitem(last=False)
