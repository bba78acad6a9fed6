"""Deterministic embedders for tests: no model, no threads of their own."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping, Sequence

import numpy as np

from hybrid_gateway.embedding.base import Matrix, Vector


def hashed_vector(text: str, dim: int = 64) -> Vector:
    """Character bigrams hashed into ``dim`` buckets, L2-normalised: shared wording = close."""
    vector = np.zeros(dim, dtype=np.float32)
    padded = f" {text.lower()} "
    for i in range(len(padded) - 1):
        digest = hashlib.blake2b(padded[i : i + 2].encode(), digest_size=4).digest()
        vector[int.from_bytes(digest, "little") % dim] += 1.0
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


class HashingEmbedder:
    """An ``Embedder``; ``table`` pins chosen texts to chosen vectors."""

    def __init__(
        self,
        *,
        dim: int = 64,
        version: str = "1",
        table: Mapping[str, Vector] | None = None,
        gate: threading.Event | None = None,
    ) -> None:
        self._dim = dim
        self._version = version
        self._table = dict(table or {})
        self.calls: list[list[str]] = []
        self.entered = threading.Event()
        self._gate = gate

    @property
    def model_id(self) -> str:
        return "hashing"

    @property
    def version(self) -> str:
        return self._version

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> Matrix:
        self.calls.append(list(texts))
        self.entered.set()
        if self._gate is not None:
            self._gate.wait(timeout=10)
        rows = [self._table.get(t, hashed_vector(t, self._dim)) for t in texts]
        return np.stack(rows).astype(np.float32) if rows else np.zeros((0, self._dim), np.float32)


class AsyncHashingEmbedder:
    """An ``AsyncEmbedder`` computed inline (tests of the cache, not of batching)."""

    def __init__(self, embedder: HashingEmbedder | None = None) -> None:
        self.inner = embedder or HashingEmbedder()
        self.calls = 0

    @property
    def namespace(self) -> str:
        return f"{self.inner.model_id}@{self.inner.version}"

    async def embed_one(self, text: str) -> Vector:
        self.calls += 1
        vector: Vector = self.inner.embed([text])[0]
        return vector

    async def embed_many(self, texts: Sequence[str]) -> Matrix:
        return self.inner.embed(texts)

    async def aclose(self) -> None:
        return None
