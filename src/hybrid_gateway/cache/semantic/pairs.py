"""Labelled question pairs (same meaning or not), in the formats of ``../shared/data/cache``.

    CSV    header ``sentence1,sentence2,label``
    TSV    ``s1<TAB>s2<TAB>label``, no header
    JSONL  ``{"text_a", "text_b", "label"}`` or ``{"sentence1", "sentence2", "label"}``

Labels may be ints or strings ("0"/"1").  ``split_pairs`` makes the seeded calibrate/measure
halves: by a hash of the pair's texts and the seed, so the same pair always lands in the same
half whatever the file order, and a reversed duplicate (a, b) / (b, a) lands with its twin.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Pair:
    a: str
    b: str
    same: bool


class PairFormatError(ValueError):
    """A pair file whose format or a line of it could not be read."""


def load_pairs(path: str | Path, *, limit: int | None = None, seed: int = 7) -> list[Pair]:
    """Read a pair file; with ``limit``, a seeded uniform sample of that many pairs."""
    file = Path(path)
    suffix = file.suffix.lower()
    if suffix == ".csv":
        pairs = list(_csv_pairs(file))
    elif suffix == ".tsv":
        pairs = list(_tsv_pairs(file))
    elif suffix in {".jsonl", ".json"}:
        pairs = list(_jsonl_pairs(file))
    else:
        raise PairFormatError(f"{file}: expected a .csv, .tsv or .jsonl pair file")
    if limit is not None and len(pairs) > limit:
        pairs = random.Random(seed).sample(pairs, limit)
    return pairs


def split_pairs(pairs: Sequence[Pair], *, seed: int) -> tuple[list[Pair], list[Pair]]:
    """Two disjoint halves (calibrate, measure), decided per pair by a seeded hash."""
    first: list[Pair] = []
    second: list[Pair] = []
    for pair in pairs:
        low, high = sorted((pair.a, pair.b))
        digest = hashlib.blake2b(f"{seed}\x00{low}\x00{high}".encode(), digest_size=8).digest()
        (first if digest[0] % 2 == 0 else second).append(pair)
    return first, second


def _label(value: object, where: str) -> bool:
    text = str(value).strip()
    if text not in {"0", "1"}:
        raise PairFormatError(f"{where}: label must be 0 or 1, got {value!r}")
    return text == "1"


def _csv_pairs(file: Path) -> Iterator[Pair]:
    with file.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        for n, row in enumerate(reader, start=2):
            try:
                yield Pair(row["sentence1"], row["sentence2"], _label(row["label"], f"{file}:{n}"))
            except KeyError as exc:
                raise PairFormatError(
                    f"{file}: CSV needs columns sentence1,sentence2,label"
                ) from exc


def _tsv_pairs(file: Path) -> Iterator[Pair]:
    with file.open(encoding="utf-8-sig") as handle:
        for n, line in enumerate(handle, start=1):
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) < 3:
                raise PairFormatError(f"{file}:{n}: expected s1<TAB>s2<TAB>label")
            yield Pair(parts[0], parts[1], _label(parts[2], f"{file}:{n}"))


def _jsonl_pairs(file: Path) -> Iterator[Pair]:
    with file.open(encoding="utf-8-sig") as handle:
        for n, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            row = json.loads(line)
            a = row.get("text_a", row.get("sentence1"))
            b = row.get("text_b", row.get("sentence2"))
            if not isinstance(a, str) or not isinstance(b, str):
                raise PairFormatError(f"{file}:{n}: expected text_a/text_b or sentence1/sentence2")
            yield Pair(a, b, _label(row.get("label"), f"{file}:{n}"))
