"""Automatic prefix caching, as vLLM (APC) and SGLang (RadixAttention) do it, approximately.

The prompt is cut in blocks of ``block_tokens`` tokens (``CHARS_PER_TOKEN`` characters each, the
tokenizer's average; a hit counts the cached characters' share of the prompt's tokens); block
i's key hashes blocks 0..i, so a key names a whole prefix.  The
cache is an LRU of at most ``capacity_tokens / block_tokens`` keys.  A request admitted to the
batch looks up its leading blocks: those found are not prefilled again (the engine charges
prefill for the rest only); then all its blocks are in the cache, most recently used.  Counts
of lookups and hit tokens are in the engine's stats (``GET /stats``).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["CHARS_PER_TOKEN", "PrefixCache", "PrefixStats", "PromptBlocks", "prompt_blocks"]

CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class PromptBlocks:
    keys: tuple[int, ...]  # the hash chain of the prompt's whole blocks
    chars: int  # the prompt's length, so a hit counts its share of the prompt's tokens
    block_chars: int


def prompt_blocks(text: str, block_tokens: int) -> PromptBlocks:
    """The hash chain of ``text``'s whole blocks (a partial last block is not cached)."""
    size = block_tokens * CHARS_PER_TOKEN
    keys: list[int] = []
    chain = hashlib.blake2b(digest_size=8)
    for start in range(0, len(text) - size + 1, size):
        chain.update(text[start : start + size].encode())
        keys.append(int.from_bytes(chain.copy().digest(), "big"))
    return PromptBlocks(tuple(keys), len(text), size)


@dataclass(frozen=True, slots=True)
class PrefixStats:
    prefix_lookups: int
    prefix_hits: int  # lookups that found at least one block
    prefix_hit_tokens: int
    prefix_lookup_tokens: int  # prompt tokens looked up (hit rate = hit / lookup tokens)
    prefix_cached_blocks: int


class PrefixCache:
    def __init__(self, capacity_tokens: int, block_tokens: int) -> None:
        self.block_tokens = block_tokens
        self._capacity = max(1, capacity_tokens // block_tokens)
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self._lookups = self._hits = self._hit_tokens = self._lookup_tokens = 0

    def admit(self, blocks: PromptBlocks, prompt_tokens: int) -> int:
        """Prompt tokens already cached for a prompt with these ``blocks`` (the cached
        characters' share of its tokens); caches all its blocks."""
        cached = 0
        for key in blocks.keys:
            if key not in self._blocks:
                break
            cached += 1
        for key in blocks.keys:
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        while len(self._blocks) > self._capacity:
            self._blocks.popitem(last=False)
        share = cached * blocks.block_chars / blocks.chars if blocks.chars else 0.0
        hit = min(prompt_tokens, round(prompt_tokens * share))
        self._lookups += 1
        self._hits += cached > 0
        self._hit_tokens += hit
        self._lookup_tokens += prompt_tokens
        return hit

    def stats(self) -> PrefixStats:
        return PrefixStats(
            prefix_lookups=self._lookups,
            prefix_hits=self._hits,
            prefix_hit_tokens=self._hit_tokens,
            prefix_lookup_tokens=self._lookup_tokens,
            prefix_cached_blocks=len(self._blocks),
        )
