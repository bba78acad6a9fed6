"""``hybrid-gateway workload export``: a workload's labels as calibration files.

    workload export --workload cal.jsonl --exclude measured.jsonl --out-dir calib/

Writes two files that the calibration commands read, from the items of ``--workload`` whose
question text is in none of the ``--exclude`` workloads (so a bench that replays those never
sends a question its thresholds were calibrated on):

- ``router-outcomes.csv`` (``prompt,weak_score,strong_score,category``: the light and heavy
  labels as 0/1 scores, one row per distinct question) for ``router calibrate --data FILE
  --weak weak_score --strong strong_score --category category``;
- ``cache-pairs.csv`` (``sentence1,sentence2,label``) for ``cache calibrate --pairs FILE``:
  label 1 for each later wording of a paraphrase group against its first wording, label 0 for
  each trap (a near-miss question in a group of its own) against the first wording of the group
  it is a near-miss of.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .schema import WorkloadItem, question, read_workload

__all__ = ["ExportCounts", "cache_pairs", "configure_export", "export", "router_rows", "run"]

ROUTER_FILE = "router-outcomes.csv"
PAIRS_FILE = "cache-pairs.csv"


@dataclass(frozen=True, slots=True)
class ExportCounts:
    items: int  # items of the workload
    excluded: int  # items left out: their question is in an excluded workload
    router_rows: int
    positive_pairs: int
    negative_pairs: int


def configure_export(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--workload", type=Path, required=True, help="the workload whose labels to export")
    add("--exclude", type=Path, nargs="*", default=[], help="workloads whose questions to skip")
    add("--out-dir", type=Path, required=True, help=f"folder for {ROUTER_FILE}, {PAIRS_FILE}")


def run(args: argparse.Namespace) -> int:
    try:
        items = read_workload(args.workload)
        excluded = {question(i) for path in args.exclude for i in read_workload(path)}
        counts = export(items, excluded, args.out_dir)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        print(f"workload export: {exc}", file=sys.stderr)
        return 2
    print(
        f"{counts.items} items, {counts.excluded} left out (asked in --exclude): "
        f"{counts.router_rows} rows in {args.out_dir / ROUTER_FILE}, "
        f"{counts.positive_pairs} same + {counts.negative_pairs} different pairs in "
        f"{args.out_dir / PAIRS_FILE}"
    )
    return 0


def export(items: Sequence[WorkloadItem], excluded: set[str], out_dir: Path) -> ExportCounts:
    kept = [item for item in items if question(item) not in excluded]
    rows = router_rows(kept)
    pairs = cache_pairs(kept)
    out_dir.mkdir(parents=True, exist_ok=True)
    _write(out_dir / ROUTER_FILE, ("prompt", "weak_score", "strong_score", "category"), rows)
    _write(out_dir / PAIRS_FILE, ("sentence1", "sentence2", "label"), pairs)
    positives = sum(1 for p in pairs if p[2] == 1)
    return ExportCounts(len(items), len(items) - len(kept), len(rows), positives,
                        len(pairs) - positives)  # fmt: skip


def router_rows(items: Iterable[WorkloadItem]) -> list[tuple[str, int, int, str]]:
    """One row per distinct question: its text, light and heavy label (0/1), category."""
    rows: dict[str, tuple[str, int, int, str]] = {}
    for item in items:
        lab = item.labels
        rows.setdefault(question(item), (question(item), int(lab.light_ok), int(lab.heavy_ok),
                                      lab.category))  # fmt: skip
    return list(rows.values())


def cache_pairs(items: Sequence[WorkloadItem]) -> list[tuple[str, str, int]]:
    """Paraphrases against their group's first wording (1), traps against their target (0)."""
    first: dict[str, str] = {}
    for item in items:
        first.setdefault(item.labels.group, question(item))
    pairs: dict[tuple[str, str], int] = {}
    for item in items:
        text, lab = question(item), item.labels
        if lab.trap_of is not None and lab.trap_of in first:
            pairs.setdefault((first[lab.trap_of], text), 0)
        elif text != first[lab.group]:
            pairs.setdefault((first[lab.group], text), 1)
    return [(a, b, label) for (a, b), label in pairs.items()]


def _write(path: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(header)
        writer.writerows(rows)
