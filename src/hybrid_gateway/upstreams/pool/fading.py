"""A dropped generation, freed a few entries at a time.

The chain memo and ``prefix_affinity``'s block table are LRUs of two generations: when the young
one is full, the old one is dropped.  Freeing a large dict at once stalls the event loop (here,
a memo's old generation took 0.14-0.47 ms, a block table's 100,000 blocks 2 ms).  ``Fading``
keeps the dropped dicts aside and empties them a few entries per call from the code that adds
new ones, so the cost of freeing is spread over the requests that made it.  Nothing reads a
dropped dict again.  Memory: the dicts being emptied come on top of the two generations, for
about half a generation's lifetime; a third one arriving before the oldest is empty frees that
oldest at once.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Fading"]

_KEPT = 2  # dropped dicts kept aside at most


class Fading:
    __slots__ = ("_dicts",)

    def __init__(self) -> None:
        self._dicts: list[dict[Any, Any]] = []

    def __len__(self) -> int:
        """Entries still to free."""
        return sum(map(len, self._dicts))

    def drop(self, generation: dict[Any, Any]) -> None:
        """Free ``generation`` bit by bit from now on (the caller keeps no reference to it)."""
        if generation:
            self._dicts.append(generation)
            if len(self._dicts) > _KEPT:
                del self._dicts[0]  # freed at once: the paced freeing fell behind

    def step(self, entries: int) -> None:
        """Free up to ``entries`` entries (nothing to do: one test)."""
        dicts = self._dicts
        while dicts and entries > 0:
            oldest = dicts[0]
            for _ in range(min(entries, len(oldest))):
                oldest.popitem()
                entries -= 1
            if not oldest:
                del dicts[0]
