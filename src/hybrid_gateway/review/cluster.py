"""Group flagged prompts by meaning: average-linkage agglomerative clustering on cosine.

Deterministic: ties break by index, and the input is in log order (time, then request id).
The merge loop keeps the pairwise similarity matrix and updates one row per merge
(Lance-Williams for average linkage), so ``n`` prompts cost O(n^2) memory and about O(n^3 / 2)
arithmetic in numpy: a week's flagged requests (hundreds to a few thousand) take seconds.
Past ``MAX_AGGLOMERATIVE`` prompts the review uses a single greedy pass instead (each prompt
joins the most similar existing cluster centroid, or starts a new one).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

# Cosine (multilingual-e5-small) above which two flagged questions are "about the same thing":
# the model scores unrelated questions 0.70-0.82 and same-topic questions 0.85 and up.
CLUSTER_SIMILARITY = 0.86
MAX_AGGLOMERATIVE = 3000

Matrix = npt.NDArray[np.float32]


def cluster(vectors: Matrix, threshold: float = CLUSTER_SIMILARITY) -> list[list[int]]:
    """Clusters of row indexes, largest first (then by first member); members in order."""
    n = len(vectors)
    if n == 0:
        return []
    groups = (
        _agglomerate(vectors, threshold) if n <= MAX_AGGLOMERATIVE else _greedy(vectors, threshold)
    )
    ordered = [sorted(g) for g in groups]
    return sorted(ordered, key=lambda g: (-len(g), g[0]))


def _agglomerate(vectors: Matrix, threshold: float) -> list[list[int]]:
    sim = (vectors @ vectors.T).astype(np.float64)
    n = len(vectors)
    np.fill_diagonal(sim, -np.inf)
    sizes = np.ones(n)
    members: list[list[int]] = [[i] for i in range(n)]
    alive = np.ones(n, dtype=bool)
    while True:
        flat = int(np.argmax(sim))  # first maximum: ties go to the lowest indexes
        a, b = divmod(flat, n)
        if sim[a, b] < threshold:
            break
        a, b = min(a, b), max(a, b)
        merged = (sim[a] * sizes[a] + sim[b] * sizes[b]) / (sizes[a] + sizes[b])
        sim[a], sim[:, a] = merged, merged
        sim[a, a] = -np.inf
        sim[b], sim[:, b] = -np.inf, -np.inf
        sizes[a] += sizes[b]
        members[a].extend(members[b])
        members[b] = []
        alive[b] = False
    return [members[i] for i in range(n) if alive[i]]


def _greedy(vectors: Matrix, threshold: float) -> list[list[int]]:
    sums: list[npt.NDArray[np.float64]] = []
    groups: list[list[int]] = []
    for i, v in enumerate(vectors.astype(np.float64)):
        if sums:
            centroids = np.stack([s / np.linalg.norm(s) for s in sums])
            scores = centroids @ v
            best = int(np.argmax(scores))
            if scores[best] >= threshold:
                sums[best] += v
                groups[best].append(i)
                continue
        sums.append(v.copy())
        groups.append([i])
    return groups
