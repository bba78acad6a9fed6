"""Questions the pair data labels the same share one group in a build (known_paraphrases.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid_gateway.tools.workload.builder import BuildOptions, build
from hybrid_gateway.tools.workload.known_paraphrases import KnownParaphrases, normalised
from hybrid_gateway.tools.workload.sources import ASSUMED, PAIR_LOADERS, Pair, Prompt

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def pair(a: str, b: str, same: bool) -> Pair:
    return Pair(Prompt(a, "lcqmc", "lcqmc", "zh", True, True, ASSUMED), b, same)


def test_a_label_1_partner_or_the_same_text_joins_the_earlier_group() -> None:
    known = KnownParaphrases()
    known.add([pair("微信公众平台怎么盈利？", "微信公众平台如何盈利", True),
               pair("微信公众平台如何盈利", "微信怎么注册", False),
               pair("如何盈利", "怎么赚钱", True)])  # fmt: skip
    known.asked("微信公众平台如何盈利？", "g000002")
    assert known.group_of("微信公众平台怎么盈利") == "g000002"  # its label-1 partner
    assert known.group_of(" 微信公众平台如何盈利 ") == "g000002"  # the same, normalised
    assert known.group_of("微信怎么注册") is None  # label 0: not the same question
    known.asked("怎么赚钱", "g000001")
    assert known.group_of("如何盈利") == "g000001"
    assert normalised("Ａbc，d？") == "abcd"


def test_a_build_opens_a_group_only_for_a_question_the_data_links_to_none_asked() -> None:
    """Each new group's first question has no label-1 partner among the questions asked before
    it (a paraphrase repeat takes its source's group as before, even where the data also links
    it to a third question: one hop, groups are not merged after the fact)."""
    items = build(BuildOptions(size=3000, zh_share=1.0, complex_share=0.0, repeat_rate=0.5,
                               trap_rate=0.1, zh_simple=("lcqmc",), seed=21), DATA)  # fmt: skip
    known = KnownParaphrases()
    known.add(PAIR_LOADERS["lcqmc"](DATA))
    groups: set[str] = set()
    joined = 0
    for item in items:
        text, group = item.messages[-1]["content"], item.labels.group
        if group not in groups:
            assert known.group_of(text) in (None, item.labels.trap_of)
        elif item.labels.trap_of is None and known.group_of(text) == group:
            joined += 1
        groups.add(group)
        known.asked(text, group)
    assert len(groups) < len({item.messages[-1]["content"] for item in items})
    assert joined > 0  # fresh draws the data links to an earlier question: one group


def test_the_links_change_group_labels_only_never_which_questions_are_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    options = BuildOptions(size=2000, seed=7)
    linked = build(options, DATA)
    monkeypatch.setattr(KnownParaphrases, "group_of", lambda self, text: None)
    unlinked = build(options, DATA)
    assert [i.messages for i in linked] == [i.messages for i in unlinked]
    assert len({i.labels.group for i in linked}) < len({i.labels.group for i in unlinked})
