"""Hashed character n-grams, TF-IDF weighted: the classifier's view of a question's surface.

The mean-pooled embedding blurs what a question is *about* once it is long (a reading passage,
a case); character n-grams keep the terms ("eigenvalue", "plaintiff", "肝硬化") whatever the
length and whatever the language (no tokeniser, so Chinese and English alike).  Each n-gram of
1 to ``max_n`` characters of the lower-cased, space-collapsed text is hashed into one of
``2**bits`` buckets, all in numpy; a prompt's vector is sublinear term frequency
(1 + log count) times the bucket's inverse document frequency, L2-normalised.  A text over
``MAX_CHARS`` is read as its head and tail.

Rows of a batch are kept as a minimal sparse matrix (row of each entry, bucket, value): the two
products a linear model needs, ``X @ w`` and ``X.T @ g``, are a gather and a ``bincount``.
The hash is fixed arithmetic on code points (never Python's salted ``hash``): a saved model
means the same thing in every process.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

_SPACE = re.compile(r"\s+")
# Longer texts are read as their first and last MAX_CHARS / 2 characters: bounds a decision's
# cost (about 9,000 n-grams hashed and sorted) like the embedder's 512-token window does.
MAX_CHARS = 3000
_PRIME = np.uint64(0x100000001B3)  # FNV-1a's 64-bit prime, as the step of a polynomial hash
_MIX = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: the top bits of h * MIX are well mixed


@dataclass(frozen=True, slots=True)
class SparseRows:
    """``n`` rows of a sparse matrix with ``width`` columns, as (row, column, value) triples."""

    n: int
    width: int
    rows: I64
    cols: I64
    values: F64

    def dot(self, weights: F64) -> F64:
        """``X @ weights``."""
        out = np.bincount(self.rows, self.values * weights[self.cols], minlength=self.n)
        return np.asarray(out, dtype=np.float64)

    def t_dot(self, g: F64) -> F64:
        """``X.T @ g``."""
        out = np.bincount(self.cols, self.values * g[self.rows], minlength=self.width)
        return np.asarray(out, dtype=np.float64)

    def subset(self, mask: npt.NDArray[np.bool_]) -> SparseRows:
        """The rows where ``mask`` holds, renumbered in order."""
        renumber = np.cumsum(mask) - 1
        keep = mask[self.rows]
        rows = renumber[self.rows[keep]]
        return SparseRows(int(mask.sum()), self.width, rows, self.cols[keep], self.values[keep])

    def scaled(self, column_scale: F64) -> SparseRows:
        """Each column multiplied by ``column_scale[column]``, rows then L2-normalised."""
        values = self.values * column_scale[self.cols]
        norms = np.sqrt(np.bincount(self.rows, values * values, minlength=self.n))
        values = values / np.maximum(norms, 1e-12)[self.rows]
        return SparseRows(self.n, self.width, self.rows, self.cols, values)


def _codes(text: str) -> npt.NDArray[np.uint64]:
    if len(text) > MAX_CHARS:  # the start (what it is about) and the end (the question itself)
        text = f"{text[: MAX_CHARS // 2]} {text[-MAX_CHARS // 2 :]}"
    clean = _SPACE.sub(" ", text.lower()).strip()
    return np.frombuffer(clean.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)


def bucket_counts(text: str, bits: int, max_n: int) -> tuple[I64, F64]:
    """The distinct buckets of a text's 1..max_n-grams and how often each occurs."""
    codes = _codes(text)
    shift = np.uint64(64 - bits)
    parts: list[npt.NDArray[np.uint64]] = []
    h = np.zeros(len(codes), dtype=np.uint64)
    for n in range(1, max_n + 1):
        if len(codes) < n:
            break
        # h[i] hashes codes[i : i + n]: extend the (n-1)-gram hash by the next code point.
        h = h[: len(codes) - n + 1] * _PRIME + codes[n - 1 :] + np.uint64(n)
        parts.append((h * _MIX) >> shift)
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    buckets, counts = np.unique(np.concatenate(parts), return_counts=True)
    return buckets.astype(np.int64), counts.astype(np.float64)


def term_rows(texts: Sequence[str], bits: int, max_n: int) -> SparseRows:
    """Sublinear term frequencies (1 + log count) of every text, not yet IDF-weighted."""
    rows: list[I64] = []
    cols: list[I64] = []
    values: list[F64] = []
    for i, text in enumerate(texts):
        buckets, counts = bucket_counts(text, bits, max_n)
        rows.append(np.full(len(buckets), i, dtype=np.int64))
        cols.append(buckets)
        values.append(1.0 + np.log(counts))
    if not texts:
        empty = np.zeros(0, np.int64)
        return SparseRows(0, 1 << bits, empty, empty, np.zeros(0))
    return SparseRows(
        len(texts), 1 << bits, np.concatenate(rows), np.concatenate(cols), np.concatenate(values)
    )


def inverse_document_frequency(terms: SparseRows, weights: F64 | None = None) -> F64:
    """Smoothed IDF per bucket, ``log((1 + N) / (1 + df)) + 1`` (documents optionally weighted)."""
    w = np.ones(terms.n) if weights is None else weights
    df = np.bincount(terms.cols, w[terms.rows], minlength=terms.width)
    total = float(w.sum())
    return np.asarray(np.log((1.0 + total) / (1.0 + df)) + 1.0, dtype=np.float64)


def tfidf_dot(text: str, idf: F32, weights: F32, max_n: int) -> float:
    """One prompt's TF-IDF vector dotted with ``weights``: the decision-time path."""
    bits = int(idf.shape[0]).bit_length() - 1
    buckets, counts = bucket_counts(text, bits, max_n)
    if len(buckets) == 0:
        return 0.0
    values = (1.0 + np.log(counts)) * idf[buckets]
    norm = float(np.sqrt(values @ values))
    return float(values @ weights[buckets]) / max(norm, 1e-12)


@dataclass(frozen=True, slots=True)
class NgramWeights:
    """The n-gram part of a trained classifier: IDF and weight per bucket, and the n-gram sizes."""

    idf: F32  # (2**bits,)
    weights: F32  # (2**bits,), on L2-normalised TF-IDF rows
    max_n: int

    @property
    def bits(self) -> int:
        return int(self.idf.shape[0]).bit_length() - 1

    def logit(self, text: str) -> float:
        return tfidf_dot(text, self.idf, self.weights, self.max_n)

    def logit_many(self, texts: Sequence[str]) -> F64:
        idf = self.idf.astype(np.float64)
        rows = term_rows(texts, self.bits, self.max_n).scaled(idf)
        return rows.dot(self.weights.astype(np.float64))
