"""The workload file: what a bench replays, and what only the bench and the emulator may read.

A workload is JSONL, one ``WorkloadItem`` per line, plus a ``<file>.meta.json`` sidecar with the
build options.  ``request_body`` is the only view of an item the gateway ever gets: the labels
(whether the light and heavy models answer it well, its paraphrase group, ...) stay with the
bench, which scores answers, and with the emulator, which loads them from the file at start-up
to decide how well each tier answers.

Answers carry a mark, ``⟦<group>|ok⟧`` or ``⟦<group>|wrong⟧``, naming the paraphrase group of the
question they were produced for.  A cached answer keeps the mark of the question that filled the
cache, so the bench can tell a correct hit (same group) from a false hit (another group).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

SIMPLE = "simple"
COMPLEX = "complex"


@dataclass(frozen=True, slots=True)
class Labels:
    """What the bench knows about an item and the gateway must never see."""

    light_ok: bool  # the light model answers it well enough
    heavy_ok: bool  # the heavy model does
    complexity: str  # SIMPLE or COMPLEX: "the light model's answer would not be good enough"
    category: str  # e.g. "banking77/card_arrival", "mmlu/college_physics"
    source: str  # the data set it came from
    group: str  # paraphrase group: items in one group are the same question asked again
    lang: str  # "en" or "zh"
    outcome: str  # "measured" (real per-model results) or "assumed" (see docs/workload.md)
    trap_of: str | None = None  # a near-miss of this group: must not share its cache entry


@dataclass(frozen=True, slots=True)
class WorkloadItem:
    id: str
    arrival_ms: float  # offset from the start of the replay
    tenant: str
    messages: tuple[Mapping[str, str], ...]
    max_tokens: int
    expected_output_tokens: int
    stream: bool
    labels: Labels

    def to_json(self) -> bytes:
        data = asdict(self)
        data["messages"] = [dict(m) for m in self.messages]
        return orjson.dumps(data)

    @classmethod
    def from_json(cls, raw: bytes | str) -> WorkloadItem:
        data = orjson.loads(raw)
        labels = Labels(**data.pop("labels"))
        messages = tuple(dict(m) for m in data.pop("messages"))
        return cls(messages=messages, labels=labels, **data)


def question(item: WorkloadItem) -> str:
    """The item's question, its last message's text: what calibration files and exclusions
    key on."""
    return str(item.messages[-1]["content"])


def request_body(item: WorkloadItem, model: str) -> dict[str, Any]:
    """The chat request the gateway receives for ``item``: no labels, no item id."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [dict(m) for m in item.messages],
        "max_tokens": item.max_tokens,
    }
    if item.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def question_key(last_user_message: str) -> str:
    """How the emulator finds the item a request asks: a digest of the last user message."""
    return hashlib.blake2b(last_user_message.strip().encode(), digest_size=12).hexdigest()


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""


_MARK = re.compile(r"⟦([^|⟧]*)\|(ok|wrong)⟧")


def answer_mark(group: str, ok: bool) -> str:
    return f"⟦{group}|{'ok' if ok else 'wrong'}⟧"


def parse_mark(text: str) -> tuple[str, bool] | None:
    """``(group, ok)`` of the first mark in an answer, or None when it carries none."""
    match = _MARK.search(text)
    return None if match is None else (match.group(1), match.group(2) == "ok")


def write_workload(path: Path, items: Iterable[WorkloadItem], meta: Mapping[str, Any]) -> int:
    count = 0
    with path.open("wb") as out:
        for item in items:
            out.write(item.to_json() + b"\n")
            count += 1
    meta_path(path).write_bytes(orjson.dumps({**meta, "items": count}, option=orjson.OPT_INDENT_2))
    return count


def read_workload(path: Path) -> list[WorkloadItem]:
    with path.open("rb") as source:
        return [WorkloadItem.from_json(line) for line in source if line.strip()]


def read_meta(path: Path) -> dict[str, Any]:
    meta = meta_path(path)
    return dict(orjson.loads(meta.read_bytes())) if meta.exists() else {}


def meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".meta.json")
