"""Embeddings kept on disk between runs of the offline tools, keyed by namespace and text hash.

``cache eval`` over a few thousand pairs takes minutes on a small CPU; a rerun (another seed,
another target precision, another decision rule) should not embed the same texts again.  The
key includes the embedder namespace (``model@version``), so a new model version never reads an
old vector.  The request path never uses this: the semantic cache has its own store.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from hybrid_gateway.embedding.base import Matrix

_SCHEMA = "CREATE TABLE IF NOT EXISTS vectors (ns TEXT, h BLOB, v BLOB, PRIMARY KEY (ns, h))"
_CHUNK = 64  # texts embedded per call: progress is saved this often


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


class DiskEmbeddingCache:
    def __init__(self, path: str | Path, namespace: str, dim: int | None = None) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path))
        self._db.execute(_SCHEMA)
        self._namespace = namespace
        self._dim = dim  # for an empty list's shape only; vectors carry their own

    def embed(
        self,
        texts: Sequence[str],
        compute: Callable[[Sequence[str]], Matrix],
        progress: Callable[[int, int], None] | None = None,
    ) -> Matrix:
        """Vectors for ``texts`` (one row each), computing and storing only the missing ones."""
        unique = list(dict.fromkeys(texts))
        known: dict[str, np.ndarray] = {}
        for i in range(0, len(unique), 500):
            chunk = unique[i : i + 500]
            by_hash = {_digest(t): t for t in chunk}
            marks = ",".join("?" * len(by_hash))
            rows = self._db.execute(
                f"SELECT h, v FROM vectors WHERE ns = ? AND h IN ({marks})",
                [self._namespace, *by_hash],
            )
            for h, v in rows:
                known[by_hash[bytes(h)]] = np.frombuffer(v, dtype=np.float32)
        missing = [t for t in unique if t not in known]
        for i in range(0, len(missing), _CHUNK):
            chunk = missing[i : i + _CHUNK]
            vectors = compute(chunk)
            self._db.executemany(
                "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)",
                [
                    (self._namespace, _digest(t), v.astype(np.float32).tobytes())
                    for t, v in zip(chunk, vectors, strict=True)
                ],
            )
            self._db.commit()
            known.update(zip(chunk, vectors, strict=True))
            if progress is not None:
                progress(min(i + _CHUNK, len(missing)), len(missing))
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        return np.stack([known[text] for text in texts]).astype(np.float32, copy=False)

    def close(self) -> None:
        self._db.close()
