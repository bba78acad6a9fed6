"""The embeddings of the window's prompts, computed once and shared by every step.

Re-ask detection, clustering and the replay of learned routing stages all need the vector of
a stored prompt; ``PromptVectors`` embeds each distinct text once (in batches, through the
gateway's configured embedder) and is itself an ``AsyncEmbedder``, so the replayed router's
learned stages read the same vectors instead of embedding every prompt again per proposal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from hybrid_gateway.embedding.base import Matrix, Vector
from hybrid_gateway.embedding.factory import SharedEmbedder

BATCH = 64


class PromptVectors:
    def __init__(self, embedder: SharedEmbedder) -> None:
        self._embedder = embedder
        self._vectors: dict[str, Vector] = {}

    @property
    def namespace(self) -> str:
        return self._embedder.namespace

    @property
    def known(self) -> Mapping[str, Vector]:
        return self._vectors

    async def ensure(self, texts: Iterable[str]) -> None:
        missing = sorted({t for t in texts if t not in self._vectors})
        for start in range(0, len(missing), BATCH):
            chunk = missing[start : start + BATCH]
            matrix = await self._embedder.embed_many(chunk)
            self._vectors.update(zip(chunk, matrix, strict=True))

    async def embed_one(self, text: str) -> Vector:
        if text not in self._vectors:
            await self.ensure([text])
        return self._vectors[text]

    def matrix(self, texts: Iterable[str]) -> Matrix:
        rows = [self._vectors[t] for t in texts]
        if not rows:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack(rows).astype(np.float32)
