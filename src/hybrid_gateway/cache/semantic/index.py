"""The vector index seam, and its in-process implementation: numpy, exact or sign-prefiltered.

Vectors live in partitions (one per namespace and bucket, see ``hygiene.py``); a search never
looks outside its partition, so tenants, embedder versions and conversation contexts cannot
meet.  ``NumpyIndex`` keeps each partition as one contiguous float32 matrix and scores a query
with one matrix-vector product: exact, no build step.  That product reads every vector, so it
grows with the partition (8-21 ms at 100k entries, 85-183 ms at 1M on the 2-core VM: more
than the embedding every lookup pays anyway).  Past ``exact_up_to`` entries a partition also
keeps a 1-bit signature per vector (the signs of the vector minus the partition's mean, 48 bytes
for 384 dimensions); a search then ranks all signatures by Hamming distance, takes the
``candidates`` nearest and scores only those exactly.  Every cosine it returns is exact, so the
hit decision (threshold, guards, verifier) is unchanged; what it can lose is a nearest entry
that the signatures did not rank among the candidates, which turns a hit into a miss or a
farther candidate, never a wrong cosine.  Why the mean: e5-style embeddings share a large common
direction (mean vector norm ~0.9), and the signs of raw vectors mostly encode it.  Measured
with ``hybrid-gateway bench semantic`` and ``benchmarks/experiments/cache_prefilter_recall.py``
(docs/semantic-cache.md).

Not thread-safe by itself: the semantic cache calls it from its one worker thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from hybrid_gateway.embedding.base import Vector

__all__ = ["EXACT_UP_TO", "PREFILTER_CANDIDATES", "STATIC_EXACT_UP_TO", "NumpyIndex",
           "VectorIndex"]  # fmt: skip

EXACT_UP_TO = 50_000  # entries in one partition searched exactly; above: signatures first
# The same for the cache cascade's static vectors (cache/semantic/build.py): on LCQMC, QQP and
# BQ (48,567 static vectors, 2,000 queries) the prefiltered nearest entry was the exact one for
# 99.55 % of queries and for all 1,181 whose nearest clears the cascade's bound (0.9961), the
# only ones e5 is asked about; search 3.0 -> 0.5 ms
# (benchmarks/experiments/static_index_prefilter.py).
STATIC_EXACT_UP_TO = 4_096
PREFILTER_CANDIDATES = 256  # rows scored exactly after the signature ranking


class VectorIndex(Protocol):
    def add(self, partition: str, entry_id: int, vector: Vector) -> None: ...

    def remove(self, partition: str, entry_id: int) -> None: ...

    def search(self, partition: str, vector: Vector, k: int) -> list[tuple[int, float]]:
        """Up to ``k`` (entry id, cosine) pairs, best first."""
        ...

    @property
    def nbytes(self) -> int: ...


class _Signatures:
    """Sign bits of ``vector - center``, 64 dimensions to a uint64, one row per word."""

    def __init__(self, matrix: npt.NDArray[np.float32], capacity: int) -> None:
        self.center = matrix.mean(axis=0, dtype=np.float64).astype(np.float32)
        self._bytes = -(-matrix.shape[1] // 64) * 8  # packed bits, padded to whole words
        self.words = np.zeros((self._bytes // 8, capacity), np.uint64)
        for start in range(0, len(matrix), 8192):  # bounded temporaries
            chunk = matrix[start : start + 8192]
            self.words[:, start : start + len(chunk)] = self.of(chunk)

    def of(self, vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.uint64]:
        """(words, len(vectors)) signatures."""
        packed = np.packbits(vectors > self.center, axis=1)
        padded = np.zeros((len(vectors), self._bytes), np.uint8)
        padded[:, : packed.shape[1]] = packed
        return padded.view(np.uint64).T

    def resize(self, capacity: int) -> None:
        words = np.zeros((self.words.shape[0], capacity), np.uint64)
        keep = min(capacity, self.words.shape[1])
        words[:, :keep] = self.words[:, :keep]
        self.words = words

    def nearest(self, vector: Vector, size: int, want: int) -> npt.NDArray[np.intp]:
        """About ``want`` rows (at least, unless ``size`` is smaller) of least Hamming distance."""
        query = self.of(np.asarray(vector, np.float32)[None, :])[:, 0]
        distance = np.zeros(size, np.uint16)
        for word, bits in zip(self.words[:, :size], query, strict=True):
            distance += np.bitwise_count(word ^ bits)
        # the distance at which ``want`` rows are reached, then every row up to it (ties kept,
        # unless they are many: then ``want`` of them)
        cutoff = int(np.searchsorted(np.cumsum(np.bincount(distance)), want))
        rows = np.flatnonzero(distance <= cutoff)
        if len(rows) > 4 * want:
            rows = rows[np.argpartition(distance[rows], want)[:want]]
        return rows


@dataclass(slots=True)
class _Block:
    matrix: npt.NDArray[np.float32]
    ids: npt.NDArray[np.int64]
    rows: dict[int, int] = field(default_factory=dict)  # entry id -> row
    size: int = 0
    signatures: _Signatures | None = None  # once the block has outgrown exact search


class NumpyIndex:
    """Cosine (vectors are L2-normalised, so a dot product) per partition."""

    def __init__(
        self,
        initial_rows: int = 64,
        *,
        exact_up_to: int = EXACT_UP_TO,
        candidates: int = PREFILTER_CANDIDATES,
    ) -> None:
        if exact_up_to < 1 or candidates < 1:
            raise ValueError("exact_up_to and candidates must be at least 1")
        self._initial = initial_rows
        self._exact_up_to = exact_up_to
        self._candidates = candidates
        self._blocks: dict[str, _Block] = {}

    @property
    def nbytes(self) -> int:
        return sum(
            b.matrix.nbytes + b.ids.nbytes + (b.signatures.words.nbytes if b.signatures else 0)
            for b in self._blocks.values()
        )

    def __len__(self) -> int:
        return sum(b.size for b in self._blocks.values())

    def partitions(self) -> Iterable[str]:
        return list(self._blocks)

    def add(self, partition: str, entry_id: int, vector: Vector) -> None:
        block = self._blocks.get(partition)
        if block is None:
            block = self._blocks[partition] = _Block(
                np.empty((self._initial, len(vector)), np.float32),
                np.empty(self._initial, np.int64),
            )
        row = block.rows.get(entry_id)
        if row is None:
            if block.size == len(block.ids):
                self._resize(block, max(self._initial, len(block.ids) * 2))
            row = block.rows[entry_id] = block.size
            block.ids[row] = entry_id
            block.size += 1
        block.matrix[row] = vector
        if block.signatures is not None:
            block.signatures.words[:, row] = block.signatures.of(block.matrix[row : row + 1])[:, 0]
        elif block.size > self._exact_up_to:
            block.signatures = _Signatures(block.matrix[: block.size], len(block.ids))

    def remove(self, partition: str, entry_id: int) -> None:
        block = self._blocks.get(partition)
        if block is None or entry_id not in block.rows:
            return
        row = block.rows.pop(entry_id)
        last = block.size - 1
        if row != last:  # move the last row into the hole: the matrix stays contiguous
            moved = int(block.ids[last])
            block.matrix[row] = block.matrix[last]
            block.ids[row] = moved
            block.rows[moved] = row
            if block.signatures is not None:
                block.signatures.words[:, row] = block.signatures.words[:, last]
        block.size = last
        if block.size == 0:
            del self._blocks[partition]
        elif block.size * 4 < len(block.ids) and len(block.ids) > self._initial:
            self._resize(block, max(self._initial, len(block.ids) // 2))  # give memory back

    @staticmethod
    def _resize(block: _Block, rows: int) -> None:
        if rows > len(block.ids):
            block.matrix = np.resize(block.matrix, (rows, block.matrix.shape[1]))
            block.ids = np.resize(block.ids, rows)
        else:
            block.matrix = block.matrix[:rows].copy()
            block.ids = block.ids[:rows].copy()
        if block.signatures is not None:
            block.signatures.resize(rows)

    def search(self, partition: str, vector: Vector, k: int) -> list[tuple[int, float]]:
        block = self._blocks.get(partition)
        if block is None or block.size == 0:
            return []
        if block.signatures is not None and block.size > self._exact_up_to:
            rows = block.signatures.nearest(vector, block.size, max(k, self._candidates))
            ids, scores = block.ids[rows], block.matrix[rows] @ vector
        else:
            ids, scores = block.ids[: block.size], block.matrix[: block.size] @ vector
        if k == 1:  # a lookup's nearest entry: one pass (argpartition and a sort cost 5-8x)
            best = int(np.argmax(scores))
            return [(int(ids[best]), float(scores[best]))]
        if k >= len(scores):
            top = np.argsort(-scores)
        else:
            top = np.argpartition(-scores, k)[:k]
            top = top[np.argsort(-scores[top])]
        return [(int(ids[i]), float(scores[i])) for i in top]
