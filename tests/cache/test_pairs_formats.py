"""Pair files as people write them: headers, blank lines, label spellings, and every way a file
can be wrong, each named by file and line (`PairFormatError`, never another exception)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid_gateway.cache.semantic.cross_encoder import pair_digest
from hybrid_gateway.cache.semantic.pairs import (
    Pair,
    PairFormatError,
    drop_overlap,
    load_pairs,
)
from tests.cache.test_cli_errors import write

EXPECTED = [Pair("a", "b", True), Pair("c", "d", False)]


def test_tsv_header_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = write(tmp_path, "p.tsv", "sentence1\tsentence2\tlabel\r\na\tb\t1\n\n  \nc\td\t0\n")
    assert load_pairs(path) == EXPECTED
    # a header anywhere else is a bad label, named by its line
    path = write(tmp_path, "q.tsv", "a\tb\t1\n\ns1\ts2\tlabel\n")
    with pytest.raises(PairFormatError, match=r"q\.tsv:3: expected a label 0 or 1"):
        load_pairs(path)


@pytest.mark.parametrize(
    ("one", "zero"),
    [("1", "0"), ("1.0", "0.0"), ("true", "false"), (" True ", "FALSE"), ("1.00", "0")],
)
def test_label_spellings(tmp_path: Path, one: str, zero: str) -> None:
    path = write(tmp_path, "p.tsv", f"a\tb\t{one}\nc\td\t{zero}\n")
    assert load_pairs(path) == EXPECTED
    csv = write(tmp_path, "p.csv", f"sentence1,sentence2,label\na,b,{one}\nc,d,{zero}\n")
    assert load_pairs(csv) == EXPECTED


@pytest.mark.parametrize(("one", "zero"), [("1", "0"), ("1.0", "0.0"), ("true", "false"),
                                           ('"1"', '"0"'), ('"true"', '"false"')])  # fmt: skip
def test_json_label_spellings(tmp_path: Path, one: str, zero: str) -> None:
    content = (f'{{"text_a": "a", "text_b": "b", "label": {one}}}\n\n'
               f'{{"sentence1": "c", "sentence2": "d", "label": {zero}}}\n')  # fmt: skip
    path = write(tmp_path, "p.jsonl", content)
    assert load_pairs(path) == EXPECTED


@pytest.mark.parametrize("label", ["2", "0.5", "yes", "-1", "nan", ""])
def test_other_labels_are_refused_with_file_and_line(tmp_path: Path, label: str) -> None:
    path = write(tmp_path, "p.tsv", f"a\tb\t1\nc\td\t{label}\n")
    with pytest.raises(PairFormatError, match=r"p\.tsv:2: expected a label 0 or 1"):
        load_pairs(path)
    path = write(tmp_path, "p.jsonl", f'{{"text_a": "a", "text_b": "b", "label": "{label}"}}\n')
    with pytest.raises(PairFormatError, match=r"p\.jsonl:1: expected a label"):
        load_pairs(path)


def test_csv_errors_give_the_file_line(tmp_path: Path) -> None:
    # the first row's text spans two lines: the bad row is on line 4, though it is row 2
    path = write(tmp_path, "p.csv", 'sentence1,sentence2,label\n"a\nstill a",b,1\nc,d,maybe\n')
    with pytest.raises(PairFormatError, match=r"p\.csv:4: expected a label 0 or 1"):
        load_pairs(path)
    path = write(tmp_path, "short.csv", "sentence1,sentence2,label\na,b,1\n\nc\n")
    with pytest.raises(PairFormatError, match=r"short\.csv:4: expected sentence1,sentence2,label"):
        load_pairs(path)
    path = write(tmp_path, "head.csv", "question,answer,label\na,b,1\n")
    with pytest.raises(PairFormatError, match=r"head\.csv:1: expected a header with columns"):
        load_pairs(path)
    assert load_pairs(write(tmp_path, "blank.csv", "sentence1,sentence2,label\na,b,1\n\n")) == [
        Pair("a", "b", True)
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"text_a": "a", "text_b": "b", "label": 1}\n[1, 2]\n', r":2: expected a JSON object"),
        ('{"text_a": "a", "text_b": "b", "label": 1}\n\n{"text_a": "x",\n', r":3: expected one "
         r"JSON object per line \(Expecting property name"),
        ('{"text_a": "a", "text_b": 3, "label": 1}\n', r":1: expected text_a/text_b"),
        ('{"text_a": "a", "text_b": "b"}\n', r":1: expected a label"),
    ],
)  # fmt: skip
def test_jsonl_errors_give_the_file_line(tmp_path: Path, content: str, message: str) -> None:
    with pytest.raises(PairFormatError, match=r"p\.jsonl" + message):
        load_pairs(write(tmp_path, "p.jsonl", content))


def test_undecodable_bytes_are_named_by_line(tmp_path: Path) -> None:
    path = write(tmp_path, "p.tsv", b"\xef\xbb\xbfa\tb\t1\n\nc\xff\td\t0\n")
    with pytest.raises(PairFormatError, match=r"p\.tsv:3: expected UTF-8 text, got byte 0xff"):
        load_pairs(path)


def test_a_text_may_hold_unicode_line_separators(tmp_path: Path) -> None:
    path = write(tmp_path, "p.tsv", "a\u2028x\tb\t1\nc\td\t0\n")
    assert load_pairs(path)[0] == Pair("a\u2028x", "b", True)


def test_sample_size_must_be_positive(tmp_path: Path) -> None:
    path = write(tmp_path, "p.tsv", "a\tb\t1\n")
    with pytest.raises(ValueError, match="sample size must be >= 1"):
        load_pairs(path, limit=0)


def test_overlap_is_either_order_and_counted() -> None:
    dev = [Pair("a", "b", True), Pair("c", "d", False)]
    test = [Pair("b", "a", True), Pair("e", "f", True), Pair("c", "d", True)]
    assert drop_overlap(dev, test) == ([Pair("e", "f", True)], 2)
    assert drop_overlap([], test) == (test, 0)


def test_the_pair_digest_is_order_free() -> None:
    assert pair_digest("a", "b") == pair_digest("b", "a") != pair_digest("a", "c")
