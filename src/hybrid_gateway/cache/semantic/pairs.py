"""Labelled question pairs (same meaning or not), in the formats of ``../shared/data/cache``.

    CSV    header ``sentence1,sentence2,label``
    TSV    ``s1<TAB>s2<TAB>label``; a first row whose label column reads ``label`` is a header
    JSONL  ``{"text_a", "text_b", "label"}`` or ``{"sentence1", "sentence2", "label"}``

Labels may be 0/1, 0.0/1.0 or true/false, as numbers, JSON booleans or strings; blank lines
are skipped.  A file that cannot be read as pairs raises ``PairFormatError`` naming the file,
the line and what was expected there.  ``split_pairs`` makes the seeded calibrate/measure
halves: by a hash of the pair's texts and the seed, so the same pair always lands in the same
half whatever the file order, and a reversed duplicate (a, b) / (b, a) lands with its twin.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class Pair:
    a: str
    b: str
    same: bool


class PairFormatError(ValueError):
    """A pair file whose format or a line of it could not be read."""


def load_pairs(path: str | Path, *, limit: int | None = None, seed: int = 7) -> list[Pair]:
    """Read a pair file; with ``limit``, a seeded uniform sample of that many pairs."""
    if limit is not None and limit < 1:
        raise ValueError(f"the sample size must be >= 1, got {limit}")
    file = Path(path)
    suffix = file.suffix.lower()
    if suffix == ".csv":
        read = _csv_pairs
    elif suffix == ".tsv":
        read = _tsv_pairs
    elif suffix in {".jsonl", ".json"}:
        read = _jsonl_pairs
    else:
        raise PairFormatError(f"{file}: expected a .csv, .tsv or .jsonl pair file")
    pairs = list(read(file, _text(file)))
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


def drop_overlap(dev: Sequence[Pair], test: Sequence[Pair]) -> tuple[list[Pair], int]:
    """TEST without the pairs DEV also has (the same two texts, in either order), and how many
    were dropped: a pair calibrated on would otherwise be measured as if it were new."""
    seen = {_key(p) for p in dev}
    kept = [p for p in test if _key(p) not in seen]
    return kept, len(test) - len(kept)


def _key(pair: Pair) -> tuple[str, str]:
    low, high = sorted((pair.a, pair.b))
    return low, high


def _text(file: Path) -> str:
    data = file.read_bytes()
    data = data.removeprefix(_BOM)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise PairFormatError(
            f"{file}:{line}: expected UTF-8 text, got byte 0x{data[exc.start]:02x}"
        ) from None


def _label(value: object, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return value == 1
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("true", "false"):
            return text == "true"
        try:
            number = float(text)
        except ValueError:
            number = -1.0
        if number in (0.0, 1.0):
            return number == 1.0
    raise PairFormatError(f"{where}: expected a label 0 or 1 (or true/false), got {value!r}")


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """Numbered non-blank lines (split on newlines only: a text may hold U+2028 and the like)."""
    for n, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if line.strip():
            yield n, line


def _csv_pairs(file: Path, text: str) -> Iterator[Pair]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        columns = reader.fieldnames or []
        if not {"sentence1", "sentence2", "label"} <= set(columns):
            raise PairFormatError(
                f"{file}:1: expected a header with columns sentence1,sentence2,label, "
                f"got {','.join(columns) or 'nothing'}"
            )
        for row in reader:
            where = f"{file}:{reader.line_num}"  # the file line, not the row count
            a, b = row["sentence1"], row["sentence2"]
            if not isinstance(a, str) or not isinstance(b, str):
                raise PairFormatError(f"{where}: expected sentence1,sentence2,label")
            yield Pair(a, b, _label(row["label"], where))
    except csv.Error as exc:
        raise PairFormatError(f"{file}:{reader.line_num}: unreadable CSV ({exc})") from None


def _tsv_pairs(file: Path, text: str) -> Iterator[Pair]:
    first = True
    for n, line in _lines(text):
        parts = line.split("\t")
        if len(parts) < 3:
            raise PairFormatError(f"{file}:{n}: expected s1<TAB>s2<TAB>label")
        if first and parts[2].strip().lower() == "label":
            first = False
            continue  # a header row
        first = False
        yield Pair(parts[0], parts[1], _label(parts[2], f"{file}:{n}"))


def _jsonl_pairs(file: Path, text: str) -> Iterator[Pair]:
    for n, line in _lines(text):
        where = f"{file}:{n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PairFormatError(
                f"{where}: expected one JSON object per line ({exc.msg} at column {exc.colno})"
            ) from None
        if not isinstance(row, dict):
            raise PairFormatError(f"{where}: expected a JSON object, got {type(row).__name__}")
        a = row.get("text_a", row.get("sentence1"))
        b = row.get("text_b", row.get("sentence2"))
        if not isinstance(a, str) or not isinstance(b, str):
            raise PairFormatError(f"{where}: expected text_a/text_b or sentence1/sentence2")
        if "label" not in row:
            raise PairFormatError(f"{where}: expected a label")
        yield Pair(a, b, _label(row["label"], where))
