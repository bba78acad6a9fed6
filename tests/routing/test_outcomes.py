from __future__ import annotations

from pathlib import Path

import pytest

from hybrid_gateway.routing.outcomes import Columns, OutcomeDataError, load_outcomes, strip_shots


def test_weak_strong_columns(tmp_path: Path) -> None:
    f = tmp_path / "m.csv"
    f.write_text('subject,prompt,weak_score,strong_score\nalg,"What is 2+2?",0,1\nalg,x,,1\n')
    rows = load_outcomes(f)
    assert len(rows) == 1 and (rows[0].weak, rows[0].strong, rows[0].category) == (0, 1, "alg")
    assert rows[0].source == "m"


def test_per_model_columns_and_k_shot_prompts(tmp_path: Path) -> None:
    prompt = repr(["Q1?\nA) x\nB) y\nAnswer:\nB\n\nQ2 is the real one?\nA) x\nB) y\nAnswer:"])
    f = tmp_path / "rb.csv"
    f.write_text(
        "sample_id,prompt,eval_name,mistralai/mixtral-8x7b-chat,gpt-4-1106-preview,x|total_cost\n"
        f'1,"{prompt}",arc,0.0,1.0,0.1\n'
    )
    rows = load_outcomes(f)
    assert rows[0].prompt == "Q2 is the real one?\nA) x\nB) y\nAnswer:"
    assert rows[0].category == "arc"
    picked = load_outcomes(
        f, Columns(weak="gpt-4-1106-preview", strong="mistralai/mixtral-8x7b-chat")
    )
    assert (picked[0].weak, picked[0].strong) == (1.0, 0.0)
    with pytest.raises(OutcomeDataError, match="no column 'nope'"):
        load_outcomes(f, Columns(weak="nope"))


def test_question_id_files_join_their_questions(tmp_path: Path) -> None:
    (tmp_path / "a_scores.csv").write_text("question_id,weak-m,gpt-4-1106-preview\nq1,3.0,9.0\n")
    (tmp_path / "a_questions.jsonl").write_text('{"question_id": "q1", "turns": ["Hi?"]}\n')
    rows = load_outcomes(tmp_path / "a_scores.csv", Columns(weak="weak-m"))
    assert (rows[0].prompt, rows[0].weak, rows[0].strong) == ("Hi?", 3.0, 9.0)


def test_labels(tmp_path: Path) -> None:
    f = tmp_path / "l.csv"
    f.write_text("prompt,label\nhow to install,simple\nprove it,complex\n")
    rows = load_outcomes(f)
    assert [(r.weak, r.strong) for r in rows] == [(1.0, 1.0), (0.0, 1.0)]
    f.write_text("prompt,label\nx,maybe\n")
    with pytest.raises(OutcomeDataError, match="simple/complex"):
        load_outcomes(f)


def test_strip_shots_keeps_plain_text() -> None:
    assert strip_shots("Just a question?") == "Just a question?"
