"""The workload builder on the real data: deterministic, honours its mix, sound groups and traps."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from hybrid_gateway.cli import main
from hybrid_gateway.tools.workload.builder import (
    COMPLEX_SOURCES,
    MEASURED_SOURCES,
    BuildError,
    BuildOptions,
    build,
)
from hybrid_gateway.tools.workload.cli import summarize
from hybrid_gateway.tools.workload.schema import (
    COMPLEX,
    SIMPLE,
    WorkloadItem,
    read_meta,
    read_workload,
)

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def text_of(item: WorkloadItem) -> str:
    return item.messages[-1]["content"]


@pytest.fixture(scope="module")
def default_items() -> list[WorkloadItem]:
    return build(BuildOptions(size=1000, tenants=3), DATA)


@pytest.fixture(scope="module")
def hard_items() -> list[WorkloadItem]:
    return build(BuildOptions(size=600, kind="hard"), DATA)


def run_build(out: Path, *extra: str) -> int:
    return main(
        ["workload", "build", "--out", str(out), "--data", str(DATA), "--size", "300", *extra]
    )


def test_same_seed_same_bytes_other_seed_differs(tmp_path: Path) -> None:
    first, second, other = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    assert run_build(first) == 0 and run_build(second) == 0
    assert run_build(other, "--seed", "8") == 0
    assert first.read_bytes() == second.read_bytes()
    assert first.read_bytes() != other.read_bytes()
    meta = read_meta(first)
    assert meta["seed"] == 7 and meta["items"] == 300 and meta["kind"] == "default"
    assert len(read_workload(first)) == 300


def test_mix_options_are_honoured(default_items: list[WorkloadItem]) -> None:
    summary = summarize(default_items)
    kinds = summary["by_kind"]
    assert summary["complex_pool"] == pytest.approx(200, abs=20)
    assert kinds["verbatim_repeat"] + kinds["paraphrase_repeat"] == pytest.approx(300, abs=15)
    assert kinds["paraphrase_repeat"] == pytest.approx(150, abs=15)
    assert kinds["trap"] == pytest.approx(50, abs=5)
    assert summary["by_lang"]["zh"] == pytest.approx(500, abs=60)
    assert summary["stream"] == pytest.approx(300, abs=50)
    assert {item.tenant for item in default_items} == {"t0", "t1", "t2"}


def test_other_mix_values_move_the_mix() -> None:
    items = build(BuildOptions(size=1000, complex_share=0.5, repeat_rate=0.1, zh_share=0.2), DATA)
    summary = summarize(items)
    assert summary["complex_pool"] == pytest.approx(500, abs=30)
    kinds = summary["by_kind"]
    assert kinds["verbatim_repeat"] + kinds["paraphrase_repeat"] == pytest.approx(100, abs=10)
    assert summary["by_lang"]["zh"] == pytest.approx(200, abs=50)


def test_ids_and_one_group_per_text(default_items: list[WorkloadItem]) -> None:
    assert [item.id for item in default_items[:2]] == ["w000001", "w000002"]
    assert default_items[-1].id == "w001000"
    group_of: dict[str, str] = {}
    for item in default_items:
        assert group_of.setdefault(text_of(item), item.labels.group) == item.labels.group
        assert item.labels.group.startswith("g") and len(item.labels.group) == 7


def test_repeats_share_a_group(default_items: list[WorkloadItem]) -> None:
    texts: dict[str, set[str]] = defaultdict(set)
    for item in default_items:
        texts[item.labels.group].add(text_of(item))
    counts: dict[str, int] = defaultdict(int)
    for item in default_items:
        counts[item.labels.group] += 1
    assert sum(1 for n in counts.values() if n > 1) > 100
    assert sum(1 for group in texts.values() if len(group) > 1) > 100  # paraphrases


def test_traps_point_at_an_earlier_group(default_items: list[WorkloadItem]) -> None:
    seen: set[str] = set()
    texts: dict[str, set[str]] = defaultdict(set)
    traps = 0
    for item in default_items:
        labels = item.labels
        if labels.trap_of is not None and labels.group not in seen:
            traps += 1
            assert labels.trap_of in seen and labels.trap_of != labels.group
            assert text_of(item) not in texts[labels.trap_of]
            assert labels.complexity == SIMPLE and labels.outcome == "assumed"
        seen.add(labels.group)
        texts[labels.group].add(text_of(item))
    assert traps > 0


def test_label_rules(default_items: list[WorkloadItem]) -> None:
    for item in default_items:
        labels = item.labels
        assert labels.complexity == (SIMPLE if labels.light_ok else COMPLEX)
        assert 8 <= item.expected_output_tokens <= item.max_tokens
        assert len(item.messages) == 1 and item.messages[0]["role"] == "user"
        if labels.source in MEASURED_SOURCES:
            assert labels.outcome == "measured"
        elif labels.source in COMPLEX_SOURCES:
            assert (labels.light_ok, labels.heavy_ok, labels.outcome) == (False, True, "assumed")
        else:
            assert (labels.light_ok, labels.heavy_ok, labels.outcome) == (True, True, "assumed")
        assert not text_of(item).startswith(("Return your final response", "['"))
    measured = [item.labels for item in default_items if item.labels.outcome == "measured"]
    assert any(not lab.light_ok for lab in measured) and any(lab.light_ok for lab in measured)


def test_hard_kind_has_only_measured_items(hard_items: list[WorkloadItem]) -> None:
    assert {item.labels.outcome for item in hard_items} == {"measured"}
    assert {item.labels.source for item in hard_items} <= MEASURED_SOURCES
    assert all(item.labels.trap_of is None for item in hard_items)
    assert {item.labels.complexity for item in hard_items} == {SIMPLE, COMPLEX}


def test_zh_sources_narrow_the_chinese_faq_pool(tmp_path: Path) -> None:
    items = build(BuildOptions(size=400, zh_share=1.0, complex_share=0.0, trap_rate=0.02,
                               zh_simple=("lcqmc",)), DATA)  # fmt: skip
    assert {item.labels.source for item in items} == {"lcqmc"}
    assert summarize(items)["by_kind"]["trap"] == pytest.approx(8, abs=1)
    out = tmp_path / "w.jsonl"
    assert run_build(out, "--zh-share", "1", "--complex-share", "0", "--zh-sources", "bq") == 0
    assert {item.labels.source for item in read_workload(out)} == {"bq"}
    assert read_meta(out)["zh_simple"] == ["bq"]
    with pytest.raises(BuildError, match="--zh-sources: nope"):
        build(BuildOptions(size=10, zh_simple=("nope",)), DATA)


def test_impossible_mix_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(BuildError):
        build(BuildOptions(size=100, repeat_rate=0.8, trap_rate=0.2), DATA)
    assert run_build(tmp_path / "w.jsonl", "--zh-share", "1.5") == 2
    assert "--zh-share" in capsys.readouterr().err


def test_exclude_leaves_out_every_question_another_workload_asks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calibration, measured = tmp_path / "cal.jsonl", tmp_path / "measured.jsonl"
    assert run_build(calibration, "--seed", "8") == 0
    asked = {text_of(item) for item in read_workload(calibration)}
    assert run_build(measured, "--exclude", str(calibration)) == 0
    kept = read_workload(measured)
    left_out = read_meta(measured)["excluded"]["items"]
    assert left_out > 0 and len(kept) == 300 - left_out  # the pools overlap: some were asked
    assert not asked & {text_of(item) for item in kept}
    assert f"({left_out} left out: asked in --exclude)" in capsys.readouterr().out
    assert run_build(measured, "--exclude", str(tmp_path / "none.jsonl")) == 2
    assert "none.jsonl" in capsys.readouterr().err


def test_a_source_that_runs_out_is_noted_with_the_item_where_the_mix_drifts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small = tmp_path / "small.jsonl"
    assert run_build(small) == 0
    assert "exhausted" not in read_meta(small) and "drifts" not in capsys.readouterr().err
    # every item a fresh Chinese complex question: AlignBench and CMATH hold about 1,400
    out = tmp_path / "zh.jsonl"
    code = main(["workload", "build", "--out", str(out), "--data", str(DATA), "--size", "2500",
                 "--complex-share", "1", "--zh-share", "1", "--repeat-rate", "0",
                 "--trap-rate", "0"])  # fmt: skip
    assert code == 0
    exhausted = read_meta(out)["exhausted"]
    assert {"alignbench", "cmath"} <= set(exhausted)
    items = read_workload(out)
    at = max(exhausted["alignbench"], exhausted["cmath"])
    assert 1 < at < 2500
    before = {item.labels.source for item in items[: at - 1]}
    after = {item.labels.source for item in items[at:]}
    assert {"alignbench", "cmath"} <= before and not after & {"alignbench", "cmath"}
    err = capsys.readouterr().err
    assert "the mix drifts: ran out of" in err and f"cmath at item w{exhausted['cmath']:06d}" in err


def test_missing_data_dir_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-data"
    code = main(["workload", "build", "--out", str(tmp_path / "w.jsonl"), "--data", str(missing)])
    assert code == 2
    assert str(missing) in capsys.readouterr().err
    assert not (tmp_path / "w.jsonl").exists()


def test_default_data_dir_falls_back_to_the_repo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no ../shared/data from here
    assert main(["workload", "build", "--out", "w.jsonl", "--size", "20"]) == 0
    assert len(read_workload(tmp_path / "w.jsonl")) == 20
