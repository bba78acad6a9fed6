"""The embedder seam.

An ``Embedder`` turns texts into L2-normalised float32 vectors.  It is synchronous and may be
slow (a model forward pass): the request path never calls it on the event loop, it awaits an
``AsyncEmbedder`` instead (a worker thread, micro-batching concurrent requests).

``namespace`` (``model_id@version``) is part of every stored vector's identity: vectors made by
one model version are never compared with another's, and a trained router refuses to load
under a different one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]  # shape (dim,), L2-normalised
Matrix = npt.NDArray[np.float32]  # shape (n, dim), rows L2-normalised


class Embedder(Protocol):
    @property
    def model_id(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Matrix:
        """Embed questions (for e5 models: with the ``query: `` prefix); blocking."""
        ...


class AsyncEmbedder(Protocol):
    @property
    def namespace(self) -> str: ...

    async def embed_one(self, text: str) -> Vector:
        """Embed one question off the event loop (concurrent calls may share a batch)."""
        ...


def namespace_of(embedder: Embedder) -> str:
    return f"{embedder.model_id}@{embedder.version}"
