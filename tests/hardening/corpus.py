"""The regression corpus: requests that once broke something, each with the answer it must get.

``corpus/chat_requests.jsonl``: one JSON object per line, ``id``, ``why`` (what it found),
``body`` (or ``raw`` bytes, ``"DEEP"`` standing for JSON nested past the parser's limit),
``status`` and ``code`` (the error code, null for a 200).  Replayed against the parser
(test_corpus.py) and against the live gateway (test_fuzz_api.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

CORPUS = Path(__file__).parent / "corpus" / "chat_requests.jsonl"


@dataclass(frozen=True)
class CorpusCase:
    id: str
    why: str
    raw: bytes
    status: int
    code: str | None

    @property
    def body(self) -> Any:
        return orjson.loads(self.raw)


def load_corpus() -> list[CorpusCase]:
    cases = []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        item = orjson.loads(line)
        deep = item.get("raw") == "DEEP"
        raw = b"[" * 2000 + b"]" * 2000 if deep else orjson.dumps(item["body"])
        cases.append(CorpusCase(item["id"], item["why"], raw, item["status"], item["code"]))
    return cases
