"""One small loader per data set in ``../shared/data`` (see its README), each returning records.

The data is read at build time and never copied into the package: several sets are research-only.
Loaders read whole files (the largest, ``cache/qqp_dev.jsonl``, is 6.5 MB) but parse JSON lines
only when needed, and keep only the fields a workload uses.
"""

from __future__ import annotations

import ast
import csv
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import orjson

MEASURED = "measured"
ASSUMED = "assumed"

# The light and heavy model of each per-model outcome set (the seed's Mixtral vs GPT-4 pair).
ROUTERBENCH_LIGHT = "mistralai/mixtral-8x7b-chat"
ROUTERBENCH_HEAVY = "gpt-4-1106-preview"
ARENA_LIGHT = "mistralai/Mixtral-8x7B-Instruct-v0.1"
ARENA_HEAVY = "gpt-4-1106-preview"
ARENA_OK_SCORE = 8.0  # GPT-4 judge score 1-10; 8+ is "a good answer"

MULTIPLE_CHOICE_MAX_TOKENS = 64
DEFAULT_MAX_TOKENS = 512
MATH500_PREFIX = "Return your final response within \\boxed{}."


class DataMissingError(FileNotFoundError):
    """The data directory (or one file in it) is not where the build looked."""


@dataclass(frozen=True, slots=True)
class Prompt:
    """One question with what is known about how each model tier answers it."""

    text: str
    source: str
    category: str
    lang: str
    light_ok: bool
    heavy_ok: bool
    outcome: str  # MEASURED or ASSUMED
    max_tokens: int = DEFAULT_MAX_TOKENS


@dataclass(frozen=True, slots=True)
class Pair:
    """A labelled question pair: ``same`` means the partner asks the same thing (label 1)."""

    prompt: Prompt  # sentence1, as an assumed-simple FAQ question
    partner: str
    same: bool


@dataclass(frozen=True, slots=True)
class TraceRow:
    offset_ms: float  # from the first row of the trace
    input_tokens: int
    output_tokens: int


def require(path: Path) -> Path:
    if not path.exists():
        raise DataMissingError(f"data file not found: {path}")
    return path


def _csv_rows(path: Path) -> Iterator[dict[str, str]]:
    with require(path).open(encoding="utf-8-sig", newline="") as source:
        yield from csv.DictReader(source)


def _json_lines(path: Path) -> Iterator[dict[str, object]]:
    with require(path).open("rb") as source:
        for line in source:
            if line.strip():
                yield orjson.loads(line)


def _faq(text: str, source: str, category: str, lang: str) -> Prompt:
    return Prompt(text, source, category, lang, light_ok=True, heavy_ok=True, outcome=ASSUMED)


def _pair(s1: str, s2: str, label: str, source: str, lang: str) -> Pair | None:
    s1, s2 = s1.strip(), s2.strip()
    if not s1 or not s2 or label.strip() not in {"0", "1"}:
        return None
    return Pair(_faq(s1, source, source, lang), s2, label.strip() == "1")


# --- simple (FAQ) questions ---------------------------------------------------------------


def load_banking77(data: Path) -> list[Prompt]:
    rows = _csv_rows(data / "cache" / "banking77_train.csv")
    return [
        _faq(row["text"].strip(), "banking77", f"banking77/{row['category']}", "en")
        for row in rows
        if row["text"].strip()
    ]


def _csv_pairs(data: Path, name: str, file: str) -> list[Pair]:
    rows = _csv_rows(data / "cache" / file)
    pairs = (_pair(r["sentence1"], r["sentence2"], r["label"], name, "zh") for r in rows)
    return [pair for pair in pairs if pair is not None]


def load_lcqmc(data: Path) -> list[Pair]:
    return _csv_pairs(data, "lcqmc", "lcqmc_dev.csv")


def load_bq(data: Path) -> list[Pair]:
    return _csv_pairs(data, "bq", "bq_dev.csv")


def load_afqmc(data: Path) -> list[Pair]:
    rows = _json_lines(data / "cache" / "afqmc_dev.jsonl")
    pairs = (
        _pair(str(r["sentence1"]), str(r["sentence2"]), str(r["label"]), "afqmc", "zh")
        for r in rows
    )
    return [pair for pair in pairs if pair is not None]


def load_oppo_xiaobu(data: Path) -> list[Pair]:
    pairs: list[Pair] = []
    with require(data / "cache" / "oppo_xiaobu_dev.tsv").open(encoding="utf-8") as source:
        for line in source:
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 3:
                continue
            pair = _pair(fields[0], fields[1], fields[2], "oppo_xiaobu", "zh")
            if pair is not None:
                pairs.append(pair)
    return pairs


def load_qqp(data: Path) -> list[Pair]:
    rows = _json_lines(data / "cache" / "qqp_dev.jsonl")
    pairs = (_pair(str(r["text_a"]), str(r["text_b"]), str(r["label"]), "qqp", "en") for r in rows)
    return [pair for pair in pairs if pair is not None]


# --- prompts with measured per-model outcomes (routing/) ----------------------------------


def _measured(
    text: str, source: str, category: str, light: bool, heavy: bool, max_tokens: int
) -> Prompt:
    return Prompt(text, source, category, "en", light, heavy, MEASURED, max_tokens)


def load_mmlu(data: Path) -> list[Prompt]:
    return [
        _measured(
            row["prompt"].strip(),
            "mmlu",
            f"mmlu/{row['subject']}",
            row["weak_score"] == "1",
            row["strong_score"] == "1",
            MULTIPLE_CHOICE_MAX_TOKENS,
        )
        for row in _csv_rows(data / "routing" / "mmlu_dev.csv")
        if row["weak_score"] in {"0", "1"} and row["strong_score"] in {"0", "1"}
    ]


def _routerbench(data: Path, task: str, max_tokens: int) -> list[Prompt]:
    prompts: list[Prompt] = []
    for row in _csv_rows(data / "routing" / f"routerbench_{task}_train.csv"):
        light, heavy = row[ROUTERBENCH_LIGHT], row[ROUTERBENCH_HEAVY]
        if not light or not heavy:  # a few rows have no outcome at all
            continue
        turns = ast.literal_eval(row["prompt"])  # stored as the repr of a list of strings
        prompts.append(
            _measured(
                str(turns[0]).strip(),
                f"routerbench_{task}",
                f"routerbench/{row['eval_name']}",
                float(light) >= 0.5,
                float(heavy) >= 0.5,
                max_tokens,
            )
        )
    return prompts


def load_routerbench_arc(data: Path) -> list[Prompt]:
    return _routerbench(data, "arc_challenge", MULTIPLE_CHOICE_MAX_TOKENS)


def load_routerbench_winogrande(data: Path) -> list[Prompt]:
    return _routerbench(data, "winograde", MULTIPLE_CHOICE_MAX_TOKENS)


def load_routerbench_mbpp(data: Path) -> list[Prompt]:
    return _routerbench(data, "mbpp", DEFAULT_MAX_TOKENS)


def load_arena(data: Path) -> list[Prompt]:
    scores = {
        row["question_id"]: (row[ARENA_LIGHT], row[ARENA_HEAVY])
        for row in _csv_rows(data / "routing" / "arena_bench_v1_scores.csv")
    }
    prompts: list[Prompt] = []
    for row in _json_lines(data / "routing" / "arena_bench_v1_questions.jsonl"):
        light, heavy = scores.get(str(row["question_id"]), ("", ""))
        turns = row["turns"]
        if not light or not heavy or not isinstance(turns, list) or not turns:
            continue
        light_ok, heavy_ok = float(light) >= ARENA_OK_SCORE, float(heavy) >= ARENA_OK_SCORE
        text = str(turns[0]).strip()
        prompts.append(_measured(text, "arena", "arena/bench-v1", light_ok, heavy_ok, 512))
    return prompts


# --- hard questions without per-model outcomes (queries/): assumed light-fails ------------


def _hard(text: str, source: str, category: str, lang: str) -> Prompt:
    return Prompt(text, source, category, lang, light_ok=False, heavy_ok=True, outcome=ASSUMED)


def load_alignbench(data: Path) -> list[Prompt]:
    keep = {"数学计算", "逻辑推理"}  # math and reasoning; the other categories are not "hard"
    return [
        _hard(str(row["question"]).strip(), "alignbench", f"alignbench/{row['category']}", "zh")
        for row in _json_lines(data / "queries" / "alignbench_zh.jsonl")
        if row["category"] in keep
    ]


def load_cmath(data: Path) -> list[Prompt]:
    return [
        _hard(str(row["question"]).strip(), "cmath", f"cmath/grade{row['grade']}", "zh")
        for row in _json_lines(data / "queries" / "cmath_zh_grades.jsonl")
        if int(str(row["grade"])) >= 4
    ]


def load_math500(data: Path) -> list[Prompt]:
    prompts: list[Prompt] = []
    for row in _json_lines(data / "queries" / "math500_levels.jsonl"):
        if int(str(row["level"])) < 4:
            continue
        text = str(row["problem"]).removeprefix(MATH500_PREFIX).strip()
        category = f"math500/level{row['level']}/{row['subject']}"
        prompts.append(_hard(text, "math500", category, "en"))
    return prompts


PROMPT_LOADERS: dict[str, Callable[[Path], list[Prompt]]] = {
    "banking77": load_banking77,
    "mmlu": load_mmlu,
    "routerbench_arc_challenge": load_routerbench_arc,
    "routerbench_winograde": load_routerbench_winogrande,
    "routerbench_mbpp": load_routerbench_mbpp,
    "arena": load_arena,
    "alignbench": load_alignbench,
    "cmath": load_cmath,
    "math500": load_math500,
}
PAIR_LOADERS: dict[str, Callable[[Path], list[Pair]]] = {
    "lcqmc": load_lcqmc,
    "bq": load_bq,
    "afqmc": load_afqmc,
    "oppo_xiaobu": load_oppo_xiaobu,
    "qqp": load_qqp,
}


# --- traces -------------------------------------------------------------------------------


def load_azure_conv(data: Path) -> list[TraceRow]:
    rows: list[TraceRow] = []
    start: datetime | None = None
    for row in _csv_rows(data / "traces" / "azure_llm_2023_conv.csv"):
        stamp = datetime.fromisoformat(row["TIMESTAMP"].strip())
        start = stamp if start is None else start
        offset = (stamp - start).total_seconds() * 1000.0
        rows.append(TraceRow(offset, int(row["ContextTokens"]), int(row["GeneratedTokens"])))
    return rows


def load_mooncake(data: Path) -> list[TraceRow]:
    rows: list[TraceRow] = []
    start: float | None = None
    for row in _json_lines(data / "traces" / "mooncake_conversation.jsonl"):
        stamp = float(str(row["timestamp"]))
        start = stamp if start is None else start
        rows.append(
            TraceRow(stamp - start, int(str(row["input_length"])), int(str(row["output_length"])))
        )
    return rows


TRACE_LOADERS: dict[str, Callable[[Path], list[TraceRow]]] = {
    "azure_conv": load_azure_conv,
    "mooncake": load_mooncake,
}
