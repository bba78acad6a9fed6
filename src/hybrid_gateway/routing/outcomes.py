"""Labelled routing data: one row per prompt with the weak and the strong model's score.

Three shapes are read, all from ``../shared/data/routing`` or files like them:

* ``prompt, weak_score, strong_score`` (``mmlu_dev.csv``), scores 0/1 or graded;
* per-model columns (RouterBench: ``prompt`` is the repr of a list of turns; Arena: scores by
  ``question_id`` with the questions in a sibling ``*_questions.jsonl``): ``--weak``/``--strong``
  name the two columns, by default the Mixtral-8x7B vs GPT-4-1106 pair the published RouteLLM
  figures use;
* explicit labels: ``prompt, label`` with ``simple``/``complex`` (or 0/1), which become scores
  as if the weak model failed exactly the complex ones.

RouterBench prompts carry k-shot exemplars that are the same on every row; the router is meant
to look at the user's question, so the loader keeps what follows the last worked exemplar.
"""

from __future__ import annotations

import ast
import csv
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import orjson

# The default weak/strong pair when a file has one column per model (substring, case-insensitive).
DEFAULT_WEAK = "mixtral-8x7b"
DEFAULT_STRONG = "gpt-4-1106-preview"
_LABELS = {"simple": 0.0, "0": 0.0, "complex": 1.0, "1": 1.0}
# Everything up to and including the last worked exemplar ("...Answer:\nB\n\n").
_SHOTS = re.compile(r"(?s)^.*Answer:[ \t]*\n?[ \t]*[A-Z][ \t]*\n\n")
_NOT_MODELS = {"sample_id", "prompt", "eval_name", "question_id", "subject", "category", "label"}


class OutcomeDataError(ValueError):
    """The file is missing, or lacks the columns asked for."""


@dataclass(frozen=True, slots=True)
class OutcomeRow:
    prompt: str
    weak: float  # the light model's score (0/1 or graded)
    strong: float  # the heavy model's score
    category: str  # MMLU subject, RouterBench eval, ...; "" when unknown
    source: str  # the file stem, for leave-one-source-out evaluation


@dataclass(frozen=True, slots=True)
class Columns:
    """Which columns to read; ``None`` picks the defaults described in the module docstring."""

    weak: str | None = None
    strong: str | None = None
    category: str | None = None
    questions: Path | None = None  # Arena-style: prompts in a JSONL keyed by question_id
    # "label": a simple/complex column; "outcomes": score columns; "auto": a label column wins.
    format: Literal["auto", "label", "outcomes"] = "auto"


def strip_shots(text: str) -> str:
    """The question after any worked k-shot exemplars (the text itself when there are none)."""
    return _SHOTS.sub("", text).strip() or text.strip()


def _csv_rows(path: Path) -> Iterator[dict[str, str]]:
    if not path.exists():
        raise OutcomeDataError(f"{path}: no such file")
    with path.open(encoding="utf-8-sig", newline="") as source:
        yield from csv.DictReader(source)


def _pick(header: Sequence[str], wanted: str | None, default: str, what: str, path: Path) -> str:
    if wanted is not None:
        if wanted not in header:
            raise OutcomeDataError(f"{path}: no column {wanted!r} for {what}")
        return wanted
    matches = [h for h in header if default in h.lower() and "|" not in h]
    if len(matches) != 1:
        models = ", ".join(h for h in header if h not in _NOT_MODELS and "|" not in h)
        raise OutcomeDataError(f"{path}: name the {what} column with a flag (one of: {models})")
    return matches[0]


def _prompt_text(raw: str) -> str:
    if raw.startswith("[") and raw.endswith("]"):
        try:
            turns = ast.literal_eval(raw)  # RouterBench: the repr of a list of turns
        except (ValueError, SyntaxError):
            return raw.strip()
        if isinstance(turns, list) and turns:
            return strip_shots(str(turns[-1]))
    return raw.strip()


def _questions(path: Path) -> dict[str, tuple[str, str]]:
    if not path.exists():
        raise OutcomeDataError(f"{path}: no such file (the questions of a question_id file)")
    out: dict[str, tuple[str, str]] = {}
    for line in path.read_bytes().splitlines():
        if line.strip():
            row = orjson.loads(line)
            turns = row.get("turns") or [""]
            out[str(row["question_id"])] = (str(turns[0]).strip(), str(row.get("category", "")))
    return out


def load_outcomes(path: str | Path, columns: Columns = Columns()) -> list[OutcomeRow]:
    """Every row with a prompt and both scores; rows with a missing score are skipped."""
    path = Path(path)
    rows = _csv_rows(path)
    first = next(rows, None)
    if first is None:
        return []
    header = list(first)
    source = path.stem
    questions: dict[str, tuple[str, str]] | None = None
    if "prompt" not in header:
        if "question_id" not in header:
            raise OutcomeDataError(f"{path}: needs a 'prompt' or a 'question_id' column")
        qpath = columns.questions or path.with_name(
            path.name.replace("_scores.csv", "_questions.jsonl")
        )
        questions = _questions(qpath)
    if columns.format == "label" or (columns.format == "auto" and "label" in header):
        if "label" not in header:
            raise OutcomeDataError(f"{path}: --format label needs a 'label' column")
        return _labelled(path, [first, *rows], source, columns.category)
    if columns.weak is None and {"weak_score", "strong_score"} <= set(header):
        weak_col, strong_col = "weak_score", "strong_score"
    else:
        weak_col = _pick(header, columns.weak, DEFAULT_WEAK, "the weak model", path)
        strong_col = _pick(header, columns.strong, DEFAULT_STRONG, "the strong model", path)
    category_col = columns.category or next(
        (c for c in ("subject", "eval_name", "category") if c in header), None
    )
    out: list[OutcomeRow] = []
    for row in (first, *rows):
        weak, strong = row.get(weak_col, ""), row.get(strong_col, "")
        if not weak or not strong:
            continue
        category = row.get(category_col, "") if category_col else ""
        if questions is not None:
            prompt, q_category = questions.get(row["question_id"], ("", ""))
            category = category or q_category
        else:
            prompt = _prompt_text(row["prompt"])
        if prompt:
            out.append(OutcomeRow(prompt, float(weak), float(strong), category, source))
    return out


def _labelled(
    path: Path, rows: list[dict[str, str]], source: str, category_col: str | None
) -> list[OutcomeRow]:
    out: list[OutcomeRow] = []
    for i, row in enumerate(rows):
        label = row["label"].strip().lower()
        if label not in _LABELS:
            raise OutcomeDataError(f"{path}: row {i + 2}: label must be simple/complex or 0/1")
        complex_ = _LABELS[label]
        category = row.get(category_col, "") if category_col else ""
        prompt = _prompt_text(row["prompt"])
        if prompt:
            out.append(OutcomeRow(prompt, 1.0 - complex_, 1.0, category, source))
    return out
