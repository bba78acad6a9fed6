"""The learned pair verifier: a second stage that judges (question, cached question) pairs.

Cosine over two independent embeddings cannot tell a paraphrase from a near-duplicate with
one fact changed, so on most sets no cosine threshold reaches 95 % precision.  The verifier
reads what cosine throws away, for the one candidate the index returned:

    embedding   a*b (which dimensions agree), |a-b| (which differ), cosine
    lexical     character-bigram Jaccard and overlap, character Jaccard, token Jaccard, edit
                similarity (difflib), length ratio and difference, "equal once normalised"
    guards      one 0/1 signal per guard of ``guards.py`` (numbers, dates, negation, ...)

and maps them through a tiny MLP (or a logistic regression) trained with numpy on labelled
pairs (``verifier_train.py``).  Its output is a probability-like score; the threshold on it is
calibrated like the cosine one (``calibrate.py``: Wilson lower bound of precision).

Run time is numpy only: features are a few tens of microseconds per pair, the model one small
matrix product.  A model file records the embedder namespace (``model_id@version``) it was
trained on; loading it under another embedder is refused, since its weights read dimensions
of that embedding space.  It also keeps an 8-byte digest of every training pair (as the
cross-encoder's file does), so ``cache eval / calibrate --verifier`` never calibrates or
measures on a pair the model was trained on; a file written before that has
``trained_pairs=None`` (unknown).
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from hybrid_gateway.cache.semantic import guards
from hybrid_gateway.cache.semantic.cross_encoder import pack_digests, pair_digest, unpack_digests
from hybrid_gateway.embedding.base import Matrix, Vector

FORMAT = "hybrid-gateway-verifier/1"  # bump when the features or the file layout change
Floats = npt.NDArray[np.float64]

_PUNCT = re.compile(r"[\W_]+", re.UNICODE)
_TOKEN = re.compile(r"[a-z0-9]+|[\u4e00-\u9fff]")
# difflib is quadratic in the length: the edit similarity reads the first 64 normalised
# characters (a whole Chinese question, the head of an English one), which keeps a long
# question's features well under a millisecond.
_EDIT_CHARS = 64
# The guards a verifier reads, fixed: a model file's features do not change when a guard is
# added to the decision's list (``order`` came later).
VERIFIER_GUARDS: tuple[str, ...] = ("numbers", "dates", "negation", "entities", "antonyms")
LEXICAL_NAMES: tuple[str, ...] = (
    "bigram_jaccard", "bigram_overlap", "char_jaccard", "token_jaccard", "edit_ratio",
    "length_ratio", "length_diff", "equal_normalised",
    *(f"guard_{name}" for name in VERIFIER_GUARDS),
)  # fmt: skip


class VerifierError(ValueError):
    """A model file that cannot be used (wrong format, or trained under another embedder)."""


def _normal(text: str) -> str:
    return _PUNCT.sub("", unicodedata.normalize("NFKC", text).lower())


def _jaccard(x: set[str], y: set[str]) -> float:
    union = len(x | y)
    return len(x & y) / union if union else 1.0


def lexical_features(a: str, b: str) -> list[float]:
    """Cheap, symmetric text features of one pair (order: ``LEXICAL_NAMES``)."""
    na, nb = _normal(a), _normal(b)
    ba = {na[i : i + 2] for i in range(len(na) - 1)} or {na}
    bb = {nb[i : i + 2] for i in range(len(nb) - 1)} or {nb}
    shorter = min(len(ba), len(bb))
    la, lb = len(na), len(nb)
    longest = max(la, lb, 1)
    check = guards.check(a, b, VERIFIER_GUARDS)
    return [
        _jaccard(ba, bb),
        len(ba & bb) / shorter if shorter else 1.0,
        _jaccard(set(na), set(nb)),
        _jaccard(set(_TOKEN.findall(a.lower())), set(_TOKEN.findall(b.lower()))),
        difflib.SequenceMatcher(None, na[:_EDIT_CHARS], nb[:_EDIT_CHARS], autojunk=False).ratio(),
        min(la, lb) / longest,
        abs(la - lb) / longest,
        float(na == nb),
        *(float(name in check.failed) for name in VERIFIER_GUARDS),
    ]


def pair_features(texts_a: Sequence[str], texts_b: Sequence[str], a: Matrix, b: Matrix) -> Floats:
    """The feature matrix of many pairs: one row per pair (embeddings are unit vectors)."""
    va, vb = np.asarray(a, np.float64), np.asarray(b, np.float64)
    cosine = np.einsum("ij,ij->i", va, vb)[:, None]
    lexical = np.array([lexical_features(x, y) for x, y in zip(texts_a, texts_b, strict=True)],
                       dtype=np.float64).reshape(len(texts_a), len(LEXICAL_NAMES))  # fmt: skip
    return np.hstack([va * vb, np.abs(va - vb), cosine, lexical])


@dataclass(frozen=True, slots=True, eq=False)
class PairVerifier:
    """A trained verifier: standardisation, weights, and what it was trained for.

    ``hidden`` is empty for a logistic regression; otherwise one ReLU layer of ``w1``/``b1``.
    """

    namespace: str  # embedder model_id@version the weights belong to
    mean: Floats
    scale: Floats
    w1: Floats  # (features, hidden) or (0, 0) for a logistic regression
    b1: Floats
    w2: Floats  # (hidden or features,)
    b2: float
    trained_on: str = ""
    trained_pairs: frozenset[bytes] | None = None  # digests (``pair_digest``); None: unknown

    def was_trained_on(self, a: str, b: str) -> bool:
        """Whether (a, b) was a training pair (False when the file does not say)."""
        return self.trained_pairs is not None and pair_digest(a, b) in self.trained_pairs

    def scores(self, features: Floats) -> Floats:
        """Probability-like scores (0..1) of a feature matrix."""
        x = (features - self.mean) / self.scale
        if self.w1.size:
            x = np.maximum(x @ self.w1 + self.b1, 0.0)
        logits = np.clip(x @ self.w2 + self.b2, -40.0, 40.0)
        return np.asarray(1.0 / (1.0 + np.exp(-logits)), dtype=np.float64)

    def score_pairs(
        self, texts_a: Sequence[str], texts_b: Sequence[str], a: Matrix, b: Matrix
    ) -> Floats:
        return self.scores(pair_features(texts_a, texts_b, a, b))

    def score(self, question: str, candidate: str, qv: Vector, cv: Vector) -> float:
        """One candidate on the request path (a few tens of microseconds)."""
        return float(self.score_pairs([question], [candidate], qv[None, :], cv[None, :])[0])

    def save(self, path: str | Path) -> None:
        file = Path(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        extra: dict[str, npt.NDArray[np.uint8]] = {}
        if self.trained_pairs is not None:
            extra["trained_pairs"] = pack_digests(self.trained_pairs)
        with file.open("wb") as handle:
            np.savez_compressed(
                handle, allow_pickle=False, format=np.array(FORMAT),
                namespace=np.array(self.namespace), trained_on=np.array(self.trained_on),
                mean=self.mean, scale=self.scale, w1=self.w1, b1=self.b1, w2=self.w2,
                b2=np.array(self.b2), **extra,
            )  # fmt: skip


def load_verifier(path: str | Path, namespace: str | None = None) -> PairVerifier:
    """Read a model file; with ``namespace``, refuse one trained under another embedder."""
    try:
        with np.load(Path(path), allow_pickle=False) as data:
            fmt = str(data["format"])
            digests = None  # a file from before the digests were kept
            if "trained_pairs" in data.files:
                digests = unpack_digests(data["trained_pairs"])
            model = PairVerifier(
                namespace=str(data["namespace"]), mean=data["mean"], scale=data["scale"],
                w1=data["w1"], b1=data["b1"], w2=data["w2"], b2=float(data["b2"]),
                trained_on=str(data["trained_on"]), trained_pairs=digests,
            )  # fmt: skip
    except (OSError, KeyError, ValueError) as exc:
        raise VerifierError(f"{path}: not a verifier model file ({exc})") from None
    if fmt != FORMAT:
        raise VerifierError(f"{path}: model format {fmt!r}, this version reads {FORMAT!r}")
    if namespace is not None and model.namespace != namespace:
        raise VerifierError(
            f"{path}: trained on embeddings of {model.namespace}, the embedder is {namespace}"
        )
    return model
