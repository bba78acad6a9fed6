"""`workload build --near-duplicate-cut`: two questions look alike only where the data relates
them."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid_gateway.tools.workload.builder import BuildError, BuildOptions, build
from hybrid_gateway.tools.workload.near_duplicates import NearDuplicates, shingles
from hybrid_gateway.tools.workload.schema import WorkloadItem, read_meta, read_workload

from .test_workload_builder import DATA, run_build, text_of

CUT = 0.4


def test_shingles_are_word_bigrams_with_a_cjk_character_a_word() -> None:
    assert shingles("单机游戏") == {("单", "机"), ("机", "游"), ("游", "戏")}
    assert shingles("Best GAME？") == shingles("best game?") == {("best", "game")}
    assert shingles("ｑｑ") == {("qq",)}  # width folded; one word, one shingle
    assert shingles("下载QQ游戏") == {("下", "载"), ("载", "qq"), ("qq", "游"), ("游", "戏")}


def test_a_near_repeat_conflicts_unless_the_data_relates_its_group() -> None:
    near = NearDuplicates(CUT)
    near.add("现在有什么好玩的单机游戏？", "g1")
    near.add("上海哪家医院骨科最好", "g2")
    assert near.conflicts("有什么单机游戏好玩的")
    assert not near.conflicts("有什么单机游戏好玩的", related={"g1"})
    assert not near.conflicts("微信公众平台怎么盈利")
    strict = NearDuplicates(0.99)
    assert not strict.conflicts("上海哪家医院骨科最好")  # nothing asked yet
    strict.add("上海哪家医院骨科最好", "g2")
    assert strict.conflicts("上海哪家医院骨科最好？")  # the same words: Dice 1
    assert not strict.conflicts("上海哪家医院骨科比较好")


def unrelated_near_repeats(items: list[WorkloadItem]) -> list[tuple[str, str]]:
    """Pairs (earlier, later) in two groups with Dice >= CUT, neither a trap of the other."""
    asked: list[tuple[frozenset[tuple[str, ...]], WorkloadItem]] = []
    found = []
    for item in items:
        own = shingles(text_of(item))
        for other, earlier in asked:
            if earlier.labels.group in (item.labels.group, item.labels.trap_of):
                continue
            if earlier.labels.trap_of == item.labels.group:  # a trap asked before its question
                continue
            if 2 * len(own & other) / (len(own) + len(other)) >= CUT:
                found.append((text_of(earlier), text_of(item)))
        asked.append((own, item))
    return found


def test_a_build_with_the_cut_has_no_unrelated_near_repeat() -> None:
    options = dict(size=600, zh_share=1.0, complex_share=0.0, repeat_rate=0.5, trap_rate=0.1,
                   zh_simple=("lcqmc",), seed=21)  # fmt: skip
    plain = build(BuildOptions(**options), DATA)  # type: ignore[arg-type]
    assert len(unrelated_near_repeats(plain)) >= 10  # what the marks would misjudge
    items = build(BuildOptions(**options, near_duplicate_cut=CUT), DATA)  # type: ignore[arg-type]
    assert len(items) == 600
    assert unrelated_near_repeats(items) == []
    traps = {text_of(i) for i in items if i.labels.trap_of is not None}
    assert len(traps) == 60  # the labelled hard negatives stay: 10 % of the slots


def test_the_cut_on_the_command_line_and_in_the_meta(tmp_path: Path) -> None:
    out = tmp_path / "w.jsonl"
    assert run_build(out, "--zh-share", "1", "--complex-share", "0", "--zh-sources", "lcqmc",
                     "--near-duplicate-cut", "0.5") == 0  # fmt: skip
    assert read_meta(out)["near_duplicate_cut"] == 0.5
    assert len(read_workload(out)) == 300
    with pytest.raises(BuildError, match="--near-duplicate-cut"):
        build(BuildOptions(size=10, near_duplicate_cut=1.5), DATA)
