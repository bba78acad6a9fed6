"""NumpyIndex: exact search, and the sign-signature prefilter a large partition switches to."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid_gateway.cache.semantic.index import NumpyIndex, _Signatures

DIM = 384


def unit(m: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    scaled: npt.NDArray[np.float32] = m / np.linalg.norm(m, axis=-1, keepdims=True)
    return scaled.astype(np.float32)


def e5_like(rng: np.random.Generator, n: int) -> npt.NDArray[np.float32]:
    """Vectors sharing one strong common direction, as e5 embeddings do (pairwise cosine ~0.8)."""
    common = unit(rng.standard_normal(DIM).astype(np.float32))
    return unit(2.0 * common + rng.standard_normal((n, DIM)).astype(np.float32) * 0.06)


Vectors = npt.NDArray[np.float32]


def near(rng: np.random.Generator, v: Vectors, cosine: float) -> Vectors:
    """A unit vector at exactly ``cosine`` from ``v``."""
    noise = rng.standard_normal(DIM).astype(np.float32)
    noise = unit(noise - (noise @ v) * v)
    return unit(cosine * v + np.sqrt(1 - cosine**2) * noise)


def reference(stored: dict[int, npt.NDArray[np.float32]], q: npt.NDArray[np.float32]) -> int:
    return max(stored, key=lambda i: float(stored[i] @ q))


def test_exact_search_orders_by_cosine_and_follows_removals() -> None:
    rng = np.random.default_rng(1)
    vectors = unit(rng.standard_normal((40, DIM)).astype(np.float32))
    index = NumpyIndex(initial_rows=4)
    for i, v in enumerate(vectors):
        index.add("p", i, v)
    for i in range(0, 40, 3):
        index.remove("p", i)
    stored = {i: vectors[i] for i in range(40) if i % 3}
    q = vectors[5]
    found = index.search("p", q, 5)
    assert found[0][0] == 5 and found[0][1] == pytest.approx(1.0, abs=1e-5)
    assert [c for _, c in found] == sorted((c for _, c in found), reverse=True)
    assert {i for i, _ in index.search("p", q, 100)} == set(stored)
    assert index.search("other", q, 1) == []


def test_a_large_partition_returns_exact_cosines_and_finds_near_duplicates() -> None:
    rng = np.random.default_rng(2)
    vectors = e5_like(rng, 3000)
    index = NumpyIndex(exact_up_to=500, candidates=16)
    for i, v in enumerate(vectors):
        index.add("p", i, v)
    stored = dict(enumerate(vectors))
    for row in rng.choice(3000, 60, replace=False):
        q = near(rng, vectors[row], 0.95)
        found = index.search("p", q, 3)
        assert len(found) == 3
        for entry, cosine in found:  # never an approximate cosine
            assert cosine == pytest.approx(float(stored[entry] @ q), abs=1e-5)
        assert found[0][0] == reference(stored, q)


def test_signatures_follow_adds_updates_removals_and_shrinking() -> None:
    rng = np.random.default_rng(3)
    vectors = e5_like(rng, 2000)
    index = NumpyIndex(initial_rows=8, exact_up_to=100, candidates=8)
    for i, v in enumerate(vectors):
        index.add("p", i, v)
    for i in range(0, 1800):  # the block shrinks twice, rows move into holes
        index.remove("p", i)
    moved = e5_like(rng, 1)[0]
    index.add("p", 1999, moved)  # an update in place
    stored = {i: vectors[i] for i in range(1800, 1999)} | {1999: moved}
    for entry, v in stored.items():
        assert index.search("p", v, 1)[0][0] == entry
    assert len(index) == 200


def test_signatures_are_signs_around_the_mean_so_each_bit_splits_the_partition() -> None:
    """Raw signs of vectors sharing a common direction leave many bits the same in every row
    (they encode the direction, not the entry); around the mean each bit splits the rows."""
    vectors = e5_like(np.random.default_rng(7), 4000)
    words = _Signatures(vectors, len(vectors)).words
    ones = np.unpackbits(words.T.copy().view(np.uint8), axis=1).mean(axis=0)
    assert np.mean((ones > 0.3) & (ones < 0.7)) > 0.95
    raw = np.unpackbits(np.packbits(vectors > 0, axis=1), axis=1).mean(axis=0)
    assert np.mean((raw > 0.3) & (raw < 0.7)) < 0.85  # what centring is for


def test_signature_memory_counts_and_is_small() -> None:
    rng = np.random.default_rng(4)
    exact, prefiltered = NumpyIndex(), NumpyIndex(exact_up_to=10)
    for i, v in enumerate(e5_like(rng, 64)):
        exact.add("p", i, v)
        prefiltered.add("p", i, v)
    extra = prefiltered.nbytes - exact.nbytes
    assert extra == 64 * 48  # 384 sign bits a row
    assert extra < exact.nbytes / 30


def test_odd_dimensions_pad_to_whole_words() -> None:
    rng = np.random.default_rng(5)
    vectors = unit(rng.standard_normal((300, 100)).astype(np.float32))
    index = NumpyIndex(exact_up_to=50, candidates=8)
    for i, v in enumerate(vectors):
        index.add("p", i, v)
    assert index.search("p", vectors[123], 1)[0][0] == 123


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        NumpyIndex(exact_up_to=0)
    with pytest.raises(ValueError, match="at least 1"):
        NumpyIndex(candidates=0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 60)), min_size=1, max_size=200),
       st.integers(1, 6))  # fmt: skip
def test_any_sequence_of_adds_and_removes_matches_a_reference(
    ops: list[tuple[bool, int]], k: int
) -> None:
    """With as many candidates as entries, the prefiltered index answers exactly like the
    reference; whatever the order of adds, updates and removals, rows and signatures agree."""
    rng = np.random.default_rng(len(ops))
    index = NumpyIndex(initial_rows=2, exact_up_to=3, candidates=64)
    stored: dict[int, npt.NDArray[np.float32]] = {}
    for add, entry in ops:
        if add:
            stored[entry] = unit(rng.standard_normal(DIM).astype(np.float32))
            index.add("p", entry, stored[entry])
        else:
            stored.pop(entry, None)
            index.remove("p", entry)
    q = unit(rng.standard_normal(DIM).astype(np.float32))
    found = index.search("p", q, k)
    want = sorted(stored, key=lambda i: -float(stored[i] @ q))[:k]
    assert [entry for entry, _ in found] == want
    assert len(index) == len(stored)


def test_many_rows_at_one_distance_are_cut_to_the_candidates() -> None:
    rng = np.random.default_rng(6)
    base = e5_like(rng, 1)[0]
    index = NumpyIndex(exact_up_to=10, candidates=4)
    for i in range(500):  # one signature shared by 500 rows
        index.add("p", i, base)
    index.add("p", 500, near(rng, base, 0.9))
    found = index.search("p", base, 2)
    assert [c for _, c in found] == [pytest.approx(1.0, abs=1e-5)] * 2
    assert {entry for entry, _ in found} < set(range(500))
