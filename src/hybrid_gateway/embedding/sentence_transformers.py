"""A sentence-transformers model from a local folder (optional extra: ``pip install '.[st]'``).

The model is loaded from ``path`` only (``local_files_only``): the gateway never downloads
weights at run time.  Its version is what the operator pinned in the config, since a folder
carries no reliable one.  torch and sentence-transformers are imported here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_gateway.embedding.base import Matrix


def _load(path: str) -> Any:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # pragma: no cover - depends on the optional extra
        raise ImportError(
            "embedding.backend sentence-transformers needs the optional extra: "
            "pip install 'hybrid-gateway[st]'"
        ) from exc
    return SentenceTransformer(path, local_files_only=True)


class SentenceTransformerEmbedder:
    def __init__(self, path: str | Path, *, version: str, query_prefix: str = "") -> None:
        self._model = _load(str(path))
        self._id = Path(path).name
        self._version = version
        self._prefix = query_prefix
        self._dim = int(self._model.get_sentence_embedding_dimension())

    @property
    def model_id(self) -> str:
        return self._id

    @property
    def version(self) -> str:
        return self._version

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> Matrix:
        vectors = self._model.encode(
            [self._prefix + t for t in texts], normalize_embeddings=True, convert_to_numpy=True
        )
        return np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(texts), self._dim)
