"""Neighbour memory: how the heavy model fared on the training questions most like this one.

A linear model over the embedding learns broad directions ("maths is hard"); difficulty is also
local (one exam's questions on one topic, one kind of word problem).  The memory keeps every
training question, projected onto its first ``dim`` principal components (cosine structure
kept, 3x smaller) and quantised to int8, with its soft target; the prior for a new question is
the mean target of its ``k`` nearest neighbours (at most a tenth of the memory).  The classifier
adds ``alpha * (logit(prior) - logit(mean target))`` to its own logit: the linear part already
knows the base rate, the memory says how this neighbourhood differs from it.

Cost: one (n x dim) int8 -> float32 matrix-vector product and a partial sort, about 0.2 ms for
the shipped model's ~9.5k questions; the file grows by n x dim bytes (~1.2 MB).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


def _logit(p: F64) -> F64:
    clipped = np.clip(p, 0.02, 0.98)  # a unanimous neighbourhood is strong evidence, not proof
    return np.asarray(np.log(clipped / (1 - clipped)), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class NeighbourMemory:
    mean: F32  # (embed_dim,) centre of the training vectors
    projection: F32  # (embed_dim, dim) principal directions
    vectors: F32  # (n, dim) projected, L2-normalised (stored as int8)
    targets: F32  # (n,) soft targets of the training questions
    k: int
    alpha: float

    @classmethod
    def build(
        cls, vectors: F32, targets: F64, *, dim: int, k: int, alpha: float
    ) -> NeighbourMemory:
        x = vectors.astype(np.float64)
        mean = x.mean(axis=0)
        centred = x - mean
        # Principal directions from the (dim x dim) covariance: far cheaper than an SVD of x.
        values, directions = np.linalg.eigh(centred.T @ centred)
        projection = directions[:, np.argsort(values)[::-1][: min(dim, len(values))]]
        memory = cls(mean.astype(np.float32), projection.astype(np.float32),
                     np.zeros((0, projection.shape[1]), np.float32),
                     targets.astype(np.float32), k, alpha)  # fmt: skip
        return cls.from_int8(memory, quantise(memory.project(vectors)))

    @classmethod
    def from_int8(cls, memory: NeighbourMemory, codes: npt.NDArray[np.int8]) -> NeighbourMemory:
        vectors = (codes.astype(np.float32) / np.float32(127)).astype(np.float32)
        return cls(memory.mean, memory.projection, vectors, memory.targets, memory.k, memory.alpha)

    def project(self, vectors: F32) -> F32:
        z = (np.atleast_2d(vectors) - self.mean) @ self.projection
        return np.asarray(z / (np.linalg.norm(z, axis=1, keepdims=True) + 1e-9), dtype=np.float32)

    def prior_many(self, vectors: F32) -> F64:
        sims = self.project(vectors) @ self.vectors.T
        k = max(1, min(self.k, self.vectors.shape[0] // 10))
        nearest = np.argpartition(-sims, k, axis=1)[:, :k]
        return np.asarray(self.targets[nearest].mean(axis=1), dtype=np.float64)

    def logit_shift_many(self, vectors: F32) -> F64:
        base = _logit(np.array([self.targets.mean()], dtype=np.float64))
        return self.alpha * (_logit(self.prior_many(vectors)) - base)


def quantise(projected: F32) -> npt.NDArray[np.int8]:
    return np.asarray(np.clip(np.round(projected * 127), -127, 127), dtype=np.int8)
