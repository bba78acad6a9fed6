"""`hybrid-gateway bench learn` on tiny workloads: real emulators and gateways, the router
curve's checkpoint retrains, both cache runs, the held-out `cache eval`, the files written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybrid_gateway.cli import main
from hybrid_gateway.tools.workload.schema import Labels, WorkloadItem, read_workload, write_workload

from .test_workload_builder import DATA, text_of


def hard_workload(path: Path) -> Path:
    items = []
    for n in range(100):
        hard = n % 2 == 0
        text = (f"Prove that the sum of the first {n} odd numbers is {n} squared, and derive the "
                f"sum of their cubes." if hard else f"What time does branch {n} open?")  # fmt: skip
        labels = Labels(not hard, True, "complex" if hard else "simple", "t", "t", f"g{n}", "en",
                        "measured")  # fmt: skip
        items.append(
            WorkloadItem(
                f"w{n:03d}",
                0.0,
                "default",
                ({"role": "user", "content": text},),
                32,
                8,
                False,
                labels,
            )
        )
    write_workload(path, items, {"seed": 1})
    return path


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data is not here")
def test_bench_learn_writes_both_curves_and_their_verdicts(tmp_path: Path) -> None:
    code = main(["bench", "learn", "--out", str(tmp_path), "--name", "tiny", "--data", str(DATA),
                 "--hard-workload", str(hard_workload(tmp_path / "hard.jsonl")),
                 "--unseen", "30", "--checkpoints", "40", "--router-rate", "1",
                 "--cache-size", "150", "--cache-rate", "1", "--min-audits", "5",
                 "--cache-unseen-size", "60",
                 "--eval-pairs", "cache/pawsx_zh_valid.tsv", "--eval-sample", "40",
                 "--concurrency", "4"])  # fmt: skip
    assert code == 0
    report = json.loads((tmp_path / "tiny.json").read_text())
    router = report["router"]
    assert router["unseen_part"] == 30 and router["first_part"] == 70
    [point] = router["checkpoints"]
    # rate 1: every light answer of the first part is audited, but an audit is skipped (never
    # queued) while its lane is busy (learning/auditor.py), which a loaded CI machine makes
    # (44 to 70 of 70 seen); under 20 labels `router train` refuses (exit 2) and no candidate
    assert 0 < point["labels"] <= 70
    models = [s["model"] for s in router["scores"]]
    if point["train_exit"] in (0, 1):
        assert point["candidate"] and models == ["shipped", f"learned@{point['labels']}"]
    else:
        assert point["train_exit"] == 2 and models == ["shipped"]
    assert all(0 <= s["apgr"] <= 1 for s in router["scores"])
    runs = report["cache"]["runs"]
    assert runs["bundled"]["total"]["requests"] == runs["learned"]["total"]["requests"] == 150
    assert runs["learned"]["labels"] <= runs["learned"]["total"]["hits"]  # rate 1, less skips
    unseen = report["cache"]["unseen"]
    assert unseen["bundled"]["threshold"] == report["cache"]["bundled_threshold"]
    assert unseen["learned"]["threshold"] == runs["learned"]["final_threshold"]
    assert unseen["bundled"]["requests"] == unseen["learned"]["requests"] <= 60
    asked = {text_of(i) for i in read_workload(tmp_path / "tiny" / "paraphrase.jsonl")}
    fresh = read_workload(tmp_path / "tiny" / "paraphrase-unseen.jsonl")
    assert fresh and not asked & {text_of(i) for i in fresh}
    [held] = report["cache"]["held_out"]
    assert held["exit"] == 0 and held["at"]["bundled"] is not None
    assert report["verdicts"][0]["goal"].startswith("router APGR")
    for suffix in (".md", "-router.png", "-cache.png"):
        assert (tmp_path / f"tiny{suffix}").stat().st_size > 0
