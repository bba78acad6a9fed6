"""`cache eval | calibrate | train-verifier` on bad input: one line on stderr naming the file,
the line or argument and what was expected, exit code 2, never a traceback.  All of these fail
before any embedding (the embeddings cache is never created)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid_gateway.cli import main

NOWHERE = "/nonexistent/m.npz"  # a model file the refused commands never get to write


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The command's stderr, checked to be one line after exit code 2 and no embedding."""
    cache = tmp_path / "never.sqlite3"
    assert main(["cache", *args, "--embeddings-cache", str(cache)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not cache.exists()
    return err


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("header.tsv", "s1\ts2\tflag\na\tb\t1\n", "header.tsv:1: expected a label 0 or 1"),
        ("array.jsonl", "[1, 2]\n", "array.jsonl:1: expected a JSON object, got list"),
        ("broken.jsonl", '{"text_a": "a", "text_b": "b", "label": 1}\n{"text_a"\n',
         "broken.jsonl:2: expected one JSON object per line"),
        ("bytes.tsv", b"a\tb\t1\nc\xfe\td\t0\n", "bytes.tsv:2: expected UTF-8 text"),
        ("pairs.txt", "a\tb\t1\n", "pairs.txt: expected a .csv, .tsv or .jsonl pair file"),
    ],
)  # fmt: skip
def test_a_bad_pair_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: str | bytes,
    expected: str,
) -> None:  # fmt: skip
    path = write(tmp_path, name, content)
    commands = [["eval", "--pairs", str(path), "--split-seed", "7"],
                ["train-verifier", "--pairs", str(path), "--out", str(tmp_path / "m.npz")],
                ["calibrate", "--pairs", str(path), "--config", str(config(tmp_path))]]  # fmt: skip
    for args in commands:
        assert expected in run(tmp_path, capsys, *args)


def test_a_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.tsv"
    err = run(tmp_path, capsys, "eval", "--pairs", str(missing), "--split-seed", "7")
    assert f"{missing}: No such file or directory" in err
    good = write(tmp_path, "good.tsv", "a\tb\t1\n")
    err = run(tmp_path, capsys, "eval", "--pairs", str(good), "--calibrate-on", str(missing))
    assert f"{missing}: No such file or directory" in err
    err = run(tmp_path, capsys, "eval", "--pairs", str(good), "--split-seed", "7",
              "--config", str(missing))  # fmt: skip
    assert "config error" in err and str(missing) in err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["eval", "--split-seed", "7", "--sample", "-1"], "--sample must be >= 1"),
        (["eval", "--split-seed", "7", "--sample", "0"], "--sample must be >= 1"),
        (["eval", "--split-seed", "7", "--z", "-1"], "--z must be a finite number >= 0"),
        (["eval", "--split-seed", "7", "--z", "nan"], "--z must be a finite number >= 0"),
        (["eval", "--split-seed", "7", "--cosine-weight", "nan"], "--cosine-weight must be >= 0"),
        (["eval", "--split-seed", "7", "--target-precision", "nan"], "--target-precision"),
        (["train-verifier", "--out", NOWHERE, "--hidden", "-2"], "--hidden must be >= 0"),
        (["train-verifier", "--out", NOWHERE, "--l2", "0.1", "-1"], "--l2 must be >= 0"),
        (["train-verifier", "--out", NOWHERE, "--sample", "5", "0"], "--sample must be >= 1"),
        (["train-verifier", "--out", NOWHERE, "--sample", "5", "6", "7"], "one per --pairs"),
    ],
)
def test_numeric_arguments_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    good = str(write(tmp_path, "good.tsv", "a\tb\t1\n"))
    files = [good, good] if args[0] == "train-verifier" else [good]
    assert expected in run(tmp_path, capsys, args[0], "--pairs", *files, *args[1:])


def config(tmp_path: Path) -> Path:
    return write(tmp_path, "gateway.yaml", "channels:\n  c: {base_url: 'http://127.0.0.1:9/v1', "
                 "model: m}\nlanes:\n  heavy: {channel: c}\n  light: {channel: c}\n")  # fmt: skip


def test_empty_dev_or_test_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = write(tmp_path, "empty.tsv", "s1\ts2\tlabel\n\n")
    good = write(tmp_path, "good.tsv", "a\tb\t1\nc\td\t0\n")
    err = run(tmp_path, capsys, "eval", "--pairs", str(empty), "--calibrate-on", str(good))
    assert f"no TEST pairs in {empty}" in err
    err = run(tmp_path, capsys, "eval", "--pairs", str(good), "--calibrate-on", str(empty))
    assert f"no DEV pairs in {empty}" in err
    one = write(tmp_path, "one.tsv", "a\tb\t1\n")  # both halves cannot hold one pair
    assert "no " in run(tmp_path, capsys, "eval", "--pairs", str(one), "--split-seed", "7")
    err = run(tmp_path, capsys, "calibrate", "--pairs", str(empty),
              "--config", str(config(tmp_path)))  # fmt: skip
    assert "no pairs to calibrate on" in err
    err = run(tmp_path, capsys, "train-verifier", "--pairs", str(empty), "--out",
              str(tmp_path / "m.npz"))  # fmt: skip
    assert "no training pairs" in err


def test_a_curve_folder_that_cannot_be_made_fails_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path, "good.tsv", "a\tb\t1\nc\td\t0\n")
    blocked = write(tmp_path, "blocked", "a file, not a folder")
    err = run(tmp_path, capsys, "eval", "--pairs", str(good), "--split-seed", "7",
              "--curve-out", str(blocked / "curves"))  # fmt: skip
    assert str(blocked) in err


def test_both_models_at_once_is_refused_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path, "good.tsv", "a\tb\t1\n")
    err = run(tmp_path, capsys, "calibrate", "--pairs", str(good), "--config",
              str(config(tmp_path)), "--verifier", "v.npz", "--reranker", "r.npz")  # fmt: skip
    assert "calibrate one at a time" in err


def test_train_reranker_bad_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before torch is imported or anything trained: runs without the [train] extra."""
    out = str(tmp_path / "r.npz")
    bad = write(tmp_path, "bad.tsv", "a\tb\tmaybe\n")
    good = write(tmp_path, "good.tsv", "a\tb\t1\n")
    cases = [
        (["--pairs", str(bad)], "bad.tsv:1: expected a label 0 or 1"),
        (["--pairs", str(tmp_path / "missing.tsv")], "missing.tsv: No such file or directory"),
        (["--pairs", str(good), "--sample", "0"], "--sample must be >= 1"),
    ]
    for args, expected in cases:
        assert main(["cache", "train-reranker", *args, "--out", out]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err, err
    assert not Path(out).exists()
