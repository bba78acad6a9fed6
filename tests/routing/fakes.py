"""A deterministic embedder for routing tests: hashed bag of words, no model."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from hybrid_gateway.embedding.base import Matrix, Vector
from hybrid_gateway.embedding.lazy import LazyEmbedding, attach_embedding
from hybrid_gateway.types import RequestRecord

DIM = 64


class WordHashEmbedder:
    """Both seams: ``embed`` (blocking, batches) and ``embed_one`` (async)."""

    def __init__(self, version: str = "1") -> None:
        self._version = version
        self.calls = 0

    @property
    def model_id(self) -> str:
        return "word-hash"

    @property
    def version(self) -> str:
        return self._version

    @property
    def dim(self) -> int:
        return DIM

    @property
    def namespace(self) -> str:
        return f"word-hash@{self._version}"

    def _one(self, text: str) -> Vector:
        v = np.zeros(DIM, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            v[int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest()) % DIM] += 1
        norm = float(np.linalg.norm(v))
        return v / norm if norm else v

    def embed(self, texts: Sequence[str]) -> Matrix:
        self.calls += len(texts)
        return np.stack([self._one(t) for t in texts]) if texts else np.zeros((0, DIM), np.float32)

    async def embed_one(self, text: str) -> Vector:
        self.calls += 1
        return self._one(text)


def with_embedding(record: RequestRecord, embedder: WordHashEmbedder, text: str) -> RequestRecord:
    attach_embedding(record, LazyEmbedding(embedder, text))
    return record
