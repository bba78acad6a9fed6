"""`workload export`: calibration files from a workload's labels, minus excluded questions."""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path

from hybrid_gateway.tools.processes import child_env, python_module_argv
from hybrid_gateway.tools.workload.export import cache_pairs, router_rows
from hybrid_gateway.tools.workload.schema import Labels, WorkloadItem, write_workload


def item(n: int, text: str, group: str, *, light_ok: bool = True,
         trap_of: str | None = None) -> WorkloadItem:  # fmt: skip
    labels = Labels(light_ok=light_ok, heavy_ok=True,
                    complexity="simple" if light_ok else "complex", category=f"cat/{group}",
                    source="s", group=group, lang="en", outcome="assumed",
                    trap_of=trap_of)  # fmt: skip
    return WorkloadItem(id=f"w{n}", arrival_ms=0.0, tenant="t",
                        messages=({"role": "user", "content": text},), max_tokens=16,
                        expected_output_tokens=8, stream=False, labels=labels)  # fmt: skip


ITEMS = [
    item(1, "how do I reset my pin", "g1"),
    item(2, "prove the theorem", "g2", light_ok=False),
    item(3, "how can I reset my PIN?", "g1"),  # paraphrase of w1
    item(4, "how do I reset my pin", "g1"),  # verbatim repeat: no pair, no second row
    item(5, "how do I reset my password", "g3", trap_of="g1"),  # near miss of w1
    item(6, "what is the capital of France", "g4"),
]


def test_rows_and_pairs() -> None:
    assert router_rows(ITEMS) == [
        ("how do I reset my pin", 1, 1, "cat/g1"),
        ("prove the theorem", 0, 1, "cat/g2"),
        ("how can I reset my PIN?", 1, 1, "cat/g1"),
        ("how do I reset my password", 1, 1, "cat/g3"),
        ("what is the capital of France", 1, 1, "cat/g4"),
    ]
    assert cache_pairs(ITEMS) == [
        ("how do I reset my pin", "how can I reset my PIN?", 1),
        ("how do I reset my pin", "how do I reset my password", 0),
    ]


def test_export_leaves_out_what_an_excluded_workload_asks(tmp_path: Path) -> None:
    source, measured = tmp_path / "cal.jsonl", tmp_path / "measured.jsonl"
    write_workload(source, ITEMS, {})
    write_workload(measured, [item(9, "how can I reset my PIN?", "x"),
                              item(10, "prove the theorem", "y")], {})  # fmt: skip
    argv = python_module_argv(
        "hybrid_gateway.cli", "workload", "export", "--workload", str(source),
        "--exclude", str(measured), "--out-dir", str(tmp_path / "out"),
    )  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=child_env(), check=False)
    assert done.returncode == 0, done.stderr
    assert "6 items, 2 left out" in done.stdout
    with (tmp_path / "out" / "router-outcomes.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["prompt"] for r in rows] == [
        "how do I reset my pin", "how do I reset my password", "what is the capital of France",
    ]  # fmt: skip
    assert set(rows[0]) == {"prompt", "weak_score", "strong_score", "category"}
    with (tmp_path / "out" / "cache-pairs.csv").open() as f:
        pairs = list(csv.DictReader(f))
    assert pairs == [{"sentence1": "how do I reset my pin",
                      "sentence2": "how do I reset my password", "label": "0"}]  # fmt: skip


def test_an_unreadable_workload_is_one_line_and_exit_2(tmp_path: Path) -> None:
    argv = python_module_argv("hybrid_gateway.cli", "workload", "export", "--workload",
                              str(tmp_path / "none.jsonl"), "--out-dir", str(tmp_path))  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=child_env(), check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("workload export:") and done.stderr.count("\n") == 1
