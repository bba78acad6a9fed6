"""The vector index seam, and its in-process implementation: exact search with numpy.

Vectors live in partitions (one per namespace and bucket, see ``hygiene.py``); a search never
looks outside its partition, so tenants, embedder versions and conversation contexts cannot
meet.  ``NumpyIndex`` keeps each partition as one contiguous float32 matrix and scores a query
with one matrix-vector product: exact, no recall loss, no build step.  Measured with
``hybrid-gateway bench semantic`` (docs/semantic-cache.md): fine up to a few 100k vectors per
partition; an ANN library (hnswlib, faiss) would plug in behind the same four methods.

Not thread-safe by itself: the semantic cache calls it from its one worker thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from hybrid_gateway.embedding.base import Vector


class VectorIndex(Protocol):
    def add(self, partition: str, entry_id: int, vector: Vector) -> None: ...

    def remove(self, partition: str, entry_id: int) -> None: ...

    def search(self, partition: str, vector: Vector, k: int) -> list[tuple[int, float]]:
        """Up to ``k`` (entry id, cosine) pairs, best first."""
        ...

    @property
    def nbytes(self) -> int: ...


@dataclass(slots=True)
class _Block:
    matrix: npt.NDArray[np.float32]
    ids: npt.NDArray[np.int64]
    rows: dict[int, int] = field(default_factory=dict)  # entry id -> row
    size: int = 0


class NumpyIndex:
    """Brute-force cosine (vectors are L2-normalised, so a dot product) per partition."""

    def __init__(self, initial_rows: int = 64) -> None:
        self._initial = initial_rows
        self._blocks: dict[str, _Block] = {}

    @property
    def nbytes(self) -> int:
        return sum(b.matrix.nbytes + b.ids.nbytes for b in self._blocks.values())

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
        if entry_id in block.rows:
            block.matrix[block.rows[entry_id]] = vector
            return
        if block.size == len(block.ids):
            grown = max(self._initial, len(block.ids) * 2)
            block.matrix = np.resize(block.matrix, (grown, block.matrix.shape[1]))
            block.ids = np.resize(block.ids, grown)
        block.matrix[block.size] = vector
        block.ids[block.size] = entry_id
        block.rows[entry_id] = block.size
        block.size += 1

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
        block.size = last
        if block.size == 0:
            del self._blocks[partition]
        elif block.size * 4 < len(block.ids) and len(block.ids) > self._initial:
            keep = max(self._initial, len(block.ids) // 2)  # give memory back after evictions
            block.matrix = block.matrix[:keep].copy()
            block.ids = block.ids[:keep].copy()

    def search(self, partition: str, vector: Vector, k: int) -> list[tuple[int, float]]:
        block = self._blocks.get(partition)
        if block is None or block.size == 0:
            return []
        scores = block.matrix[: block.size] @ vector
        if k >= block.size:
            top = np.argsort(-scores)
        else:
            top = np.argpartition(-scores, k)[:k]
            top = top[np.argsort(-scores[top])]
        return [(int(block.ids[i]), float(scores[i])) for i in top]
