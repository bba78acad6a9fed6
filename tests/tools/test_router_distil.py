"""`hybrid-gateway router distil` on a small file: the bundled e5 and static embedders, the shipped
classifier as teacher; its errors are one line and exit 2."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from hybrid_gateway.cli import main
from hybrid_gateway.embedding.bundled import MODEL_ID, bundled_version
from hybrid_gateway.embedding.static import StaticE5Embedder
from hybrid_gateway.routing.build import default_model_path
from hybrid_gateway.routing.cascade import fingerprint, teacher_of
from hybrid_gateway.routing.classifier import load_model
from tests.routing.test_cli import COMPLEX, SIMPLE


def outcomes(path: Path, copies: int) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["subject", "prompt", "weak_score", "strong_score"])
        for n in range(copies):
            for text in SIMPLE:
                writer.writerow(["faq", f"{text} ({n})", 1, 1])
            for text in COMPLEX:
                writer.writerow(["proofs", f"{text} ({n})", 0, 1])
    return path


def test_a_student_of_the_shipped_classifier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, out = outcomes(tmp_path / "o.csv", 5), tmp_path / "student.npz"  # 60 prompts
    argv = ["router", "distil", "--data", str(data), "--out", str(out), "--threshold", "0.57",
            "--embed-cache", str(tmp_path / "e.sqlite3")]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}: student of default on 60 prompts" in printed
    student = load_model(out, f"{MODEL_ID}@{StaticE5Embedder().version}")
    teacher = load_model(default_model_path(), f"{MODEL_ID}@{bundled_version()}")
    assert teacher_of(student) == fingerprint(teacher)
    held_out = student.info["held_out"]
    assert isinstance(held_out, dict) and held_out["rows"] == 60 and held_out["threshold"] == 0.57
    margins = held_out["margins"]
    assert isinstance(margins, dict) and len(margins) == 5  # 10 % ... 50 % of prompts to e5


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--threshold", "1.5", "--out", "s.npz"], "--threshold must be between 0 and 1"),
        ([], "--out is required"),
        (["--out", "s.npz", "--teacher", "missing.npz"], "not a readable router model"),
    ],
    ids=["threshold", "no-out", "no-teacher"],
)
def test_bad_arguments_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    data = outcomes(tmp_path / "o.csv", 1)
    assert main(["router", "distil", "--data", str(data), *extra]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("router distil: ") and message in line


def test_too_few_prompts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = outcomes(tmp_path / "o.csv", 2)  # 24 prompts
    argv = ["router", "distil", "--data", str(data), "--out", str(tmp_path / "s.npz"),
            "--embed-cache", str(tmp_path / "e.sqlite3")]  # fmt: skip
    assert main(argv) == 2
    assert "24 prompts; at least 50 are needed" in capsys.readouterr().err
