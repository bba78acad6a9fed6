"""The complexity classifier: P(complex) from the request embedding plus cheap text features.

A logistic model over ``[embedding, standardised text features]``: one dot product of about
400 numbers, a few microseconds per decision once the embedding exists.  Optionally (format 2)
also over the prompt's hashed character n-grams, TF-IDF weighted (``routing/ngrams.py``): the
terms a long question is about, which the mean-pooled embedding blurs; a few hundred
microseconds more for a long prompt.  "Complex" means the
heavy model is expected to do better than the light one (see ``routing/training.py`` for the
target), so ranking prompts by P(complex) is ranking them by what a heavy call buys.

Format 3 replaces the logistic model by the outcome heads of ``routing/heads.py``: per source,
softmax probabilities of "light better", "both wrong", "both right" and "heavy better", scored
by the expected gain (opt-in, ``router train --target outcomes``).

A model is tied to the embedder it was trained with: the file records the embedder namespace
(``model_id@version``) and ``load_model`` refuses another one, because a different model (or
version) puts questions at different places and the weights would silently mean nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hybrid_gateway.routing.features import FEATURE_NAMES, text_features
from hybrid_gateway.routing.heads import LinearHead, OutcomeHeads
from hybrid_gateway.routing.memory import NeighbourMemory, quantise
from hybrid_gateway.routing.ngrams import MAX_CHARS, NgramWeights

FORMAT = "hybrid-gateway-router/1"  # embedding + text features (+ neighbour memory)
FORMAT_NGRAMS = "hybrid-gateway-router/2"  # the same plus hashed character n-grams
FORMAT_OUTCOMES = "hybrid-gateway-router/3"  # outcome heads (+ neighbour memory)
_FORMATS = (FORMAT, FORMAT_NGRAMS, FORMAT_OUTCOMES)
Array = npt.NDArray[np.float32]


class RouterModelError(ValueError):
    """A model file that cannot be used here: unreadable, another format, another embedder."""


def sigmoid(z: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The logistic function, its logit clipped at +-60: past that it is 0 or 1 to double
    precision, and ``exp`` would overflow."""
    clipped = np.clip(np.asarray(z), -60.0, 60.0)
    return np.asarray(1.0 / (1.0 + np.exp(-clipped)), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class ClassifierModel:
    namespace: str  # embedder model_id@version the weights were trained with
    head: LinearHead | OutcomeHeads  # the logit from [embedding, standardised features]
    feature_mean: Array
    feature_std: Array
    # How it was trained (sources, rows, target, regularisation): shown by `router eval`.
    info: dict[str, object] = field(default_factory=dict)
    # The training questions' neighbourhood prior (routing/memory.py); None: linear only.
    memory: NeighbourMemory | None = None
    # Hashed character n-gram weights (routing/ngrams.py); None: embedding and features only.
    ngrams: NgramWeights | None = None

    @property
    def dim(self) -> int:
        return self.head.dim

    def p_complex(self, vector: Array, text: str) -> float:
        z = self._linear(vector[None, :], text_features(text)[None, :])
        if self.ngrams is not None:
            z = z + self.ngrams.logit(text)
        return float(sigmoid(z)[0])

    def p_complex_many(
        self, vectors: Array, feats: Array, texts: Sequence[str]
    ) -> npt.NDArray[np.float64]:
        """Batch form for training and evaluation: ``feats`` are ``text_features(texts)`` rows."""
        z = self._linear(vectors, feats)
        if self.ngrams is not None:
            z = z + self.ngrams.logit_many(texts)
        return sigmoid(z)

    def _linear(self, vectors: Array, feats: Array) -> npt.NDArray[np.float64]:
        standardised = (feats - self.feature_mean) / self.feature_std
        z = self.head.logit_many(vectors.astype(np.float64), standardised.astype(np.float64))
        if self.memory is not None:
            z = z + self.memory.logit_shift_many(vectors)
        return np.asarray(z, dtype=np.float64)

    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        meta: dict[str, object] = {"format": FORMAT, "namespace": self.namespace,
                "features": list(FEATURE_NAMES), "info": self.info}  # fmt: skip
        arrays: dict[str, npt.NDArray[Any]]
        head = self.head
        if isinstance(head, LinearHead):
            meta["bias"] = _f32(head.bias)
            arrays = {"embed_weights": head.embed_weights.astype(np.float32),
                      "feature_weights": head.feature_weights.astype(np.float32)}  # fmt: skip
        else:
            meta |= {"format": FORMAT_OUTCOMES, "scale": _f32(head.scale),
                     "shift": _f32(head.shift)}  # fmt: skip
            arrays = {"head_weights": head.weights.astype(np.float32),
                      "head_mix": head.mix.astype(np.float32)}  # fmt: skip
        arrays |= {"feature_mean": self.feature_mean.astype(np.float32),
                   "feature_std": self.feature_std.astype(np.float32)}  # fmt: skip
        if self.memory is not None:
            memory = self.memory
            meta["memory"] = {"k": memory.k, "alpha": memory.alpha}
            arrays |= {
                "memory_mean": memory.mean,
                "memory_projection": memory.projection,
                "memory_targets": memory.targets.astype(np.float16),
            }
            arrays["memory_codes"] = quantise(memory.vectors)
        if self.ngrams is not None:
            if not isinstance(head, LinearHead):
                raise ValueError("character n-grams extend the linear head only")
            meta["format"] = FORMAT_NGRAMS
            meta["ngrams"] = {"max_n": self.ngrams.max_n, "bits": self.ngrams.bits,
                              "max_chars": MAX_CHARS}  # fmt: skip
            arrays |= {"ngram_idf": self.ngrams.idf, "ngram_weights": self.ngrams.weights}
        arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
        with Path(path).open("wb") as out:
            np.savez_compressed(out, allow_pickle=False, **arrays)


def load_model(path: str | Path, namespace: str | None) -> ClassifierModel:
    """Read a model file; with ``namespace`` given, refuse a model trained under another one."""
    try:
        with np.load(Path(path), allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            arrays = {k: np.asarray(data[k], dtype=np.float32) for k in data.files if k != "meta"}
            codes = np.asarray(data["memory_codes"]) if "memory_codes" in data.files else None
    except (OSError, ValueError, KeyError) as exc:
        raise RouterModelError(f"{path}: not a readable router model ({exc})") from None
    if meta.get("format") not in _FORMATS:
        raise RouterModelError(
            f"{path}: format {meta.get('format')!r}, expected one of {', '.join(_FORMATS)}; "
            "retrain it with this version (`hybrid-gateway router train`)"
        )
    if tuple(meta.get("features", ())) != FEATURE_NAMES:
        raise RouterModelError(f"{path}: trained on other text features than this version's")
    if namespace is not None and meta["namespace"] != namespace:
        raise RouterModelError(
            f"{path}: trained with embedder {meta['namespace']!r}, but the gateway embeds with "
            f"{namespace!r}; retrain it (`hybrid-gateway router train`) under this embedder"
        )
    return ClassifierModel(
        namespace=str(meta["namespace"]),
        head=_head(path, meta, arrays),
        feature_mean=arrays["feature_mean"],
        feature_std=arrays["feature_std"],
        info=dict(meta.get("info", {})),
        memory=_memory(meta, arrays, codes),
        ngrams=_ngrams(path, meta, arrays),
    )


def _head(
    path: str | Path, meta: dict[str, Any], arrays: dict[str, Array]
) -> LinearHead | OutcomeHeads:
    try:
        if meta["format"] == FORMAT_OUTCOMES:
            return OutcomeHeads(arrays["head_weights"], arrays["head_mix"], float(meta["scale"]),
                                float(meta["shift"]), len(FEATURE_NAMES))  # fmt: skip
        return LinearHead(arrays["embed_weights"], arrays["feature_weights"], float(meta["bias"]))
    except KeyError as exc:
        raise RouterModelError(f"{path}: not a readable router model (no {exc})") from None


def _ngrams(
    path: str | Path, meta: dict[str, Any], arrays: dict[str, Array]
) -> NgramWeights | None:
    settings = meta.get("ngrams")
    if settings is None:
        return None
    if settings.get("max_chars") != MAX_CHARS or "ngram_weights" not in arrays:
        raise RouterModelError(
            f"{path}: its n-grams were read from texts differently from this version "
            "(or are missing); retrain it (`hybrid-gateway router train`)"
        )
    return NgramWeights(arrays["ngram_idf"], arrays["ngram_weights"], int(settings["max_n"]))


def _f32(value: float) -> float:
    """A fitted scalar at the weights' precision: fits equal to float32 write the same file."""
    return float(np.float32(value))


def _memory(
    meta: dict[str, Any], arrays: dict[str, Array], codes: npt.NDArray[np.int8] | None
) -> NeighbourMemory | None:
    settings = meta.get("memory")
    if settings is None or codes is None:
        return None
    shell = NeighbourMemory(arrays["memory_mean"], arrays["memory_projection"],
                            np.zeros((0, codes.shape[1]), np.float32), arrays["memory_targets"],
                            int(settings["k"]), float(settings["alpha"]))  # fmt: skip
    return NeighbourMemory.from_int8(shell, codes)
