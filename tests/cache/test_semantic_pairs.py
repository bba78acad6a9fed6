from __future__ import annotations

from pathlib import Path

import pytest

from hybrid_gateway.cache.semantic.pairs import Pair, PairFormatError, load_pairs, split_pairs


def test_the_three_formats(tmp_path: Path) -> None:
    (tmp_path / "p.csv").write_text("\ufeffsentence1,sentence2,label\na,b,1\nc,d,0\n", "utf-8")
    (tmp_path / "p.tsv").write_text("a\tb\t1\nc\td\t0\n", "utf-8")
    (tmp_path / "p.jsonl").write_text(
        '{"text_a": "a", "text_b": "b", "label": 1}\n'
        '{"sentence1": "c", "sentence2": "d", "label": "0"}\n'
    )
    expected = [Pair("a", "b", True), Pair("c", "d", False)]
    for name in ("p.csv", "p.tsv", "p.jsonl"):
        assert load_pairs(tmp_path / name) == expected


def test_bad_label_and_unknown_format(tmp_path: Path) -> None:
    (tmp_path / "bad.tsv").write_text("a\tb\tmaybe\n")
    with pytest.raises(PairFormatError, match="label"):
        load_pairs(tmp_path / "bad.tsv")
    with pytest.raises(PairFormatError):
        load_pairs(tmp_path / "x.txt")


def test_split_is_seeded_disjoint_and_keeps_reversed_twins_together() -> None:
    pairs = [Pair(f"q{i}", f"p{i}", i % 3 == 0) for i in range(400)]
    first, second = split_pairs(pairs, seed=7)
    assert len(first) + len(second) == 400 and 150 < len(first) < 250
    assert split_pairs(pairs, seed=7) == (first, second)
    assert split_pairs(pairs, seed=8) != (first, second)
    twin = [Pair("x", "y", True), Pair("y", "x", True)]
    a, b = split_pairs(twin, seed=7)
    assert sorted([len(a), len(b)]) == [0, 2]


def test_sample_is_seeded(tmp_path: Path) -> None:
    (tmp_path / "p.tsv").write_text("".join(f"a{i}\tb{i}\t{i % 2}\n" for i in range(100)))
    one = load_pairs(tmp_path / "p.tsv", limit=10, seed=1)
    assert len(one) == 10 and one == load_pairs(tmp_path / "p.tsv", limit=10, seed=1)
