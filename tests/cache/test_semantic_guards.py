"""The cheap guards catch the classic traps, in Chinese and English, and let paraphrases through."""

from __future__ import annotations

import pytest

from hybrid_gateway.cache.semantic.guards import GUARD_NAMES, check, negations, numbers

TRAPS = [
    ("numbers", "转账限额是5000元吗", "转账限额是50000元吗"),
    ("numbers", "iPhone 13 的电池多大", "iPhone 14 的电池多大"),
    ("numbers", "How many days in 3 weeks?", "How many days in 4 weeks?"),
    ("numbers", "三天后能到账吗", "五天后能到账吗"),
    ("dates", "明天北京天气怎么样", "今天北京天气怎么样"),
    ("dates", "Is the office open on Monday?", "Is the office open on Sunday?"),
    ("negation", "为什么不能用花呗付款", "为什么能用花呗付款"),
    ("negation", "信用卡没有激活怎么办", "信用卡激活了怎么办"),
    ("negation", "Why can't I log in?", "Why can I log in?"),
    ("negation", "Which foods are not healthy?", "Which foods are healthy?"),
    ("entities", "What is the capital of France?", "What is the capital of Germany?"),
    ("entities", "微信怎么绑定QQ", "微信怎么绑定Gmail"),
    ("antonyms", "良药苦口利于病的下一句", "良药苦口利于病的上一句"),
    ("antonyms", "How do I upload a file?", "How do I download a file?"),
    ("order", "长时间以来你都很喜欢我", "长时间以来我都很喜欢你"),
    ("order", "浅绿色裤子配什么颜色鞋子", "浅绿色的鞋子配什么颜色的裤子"),
    (
        "order",
        "Can data science graduates apply for psychology?",
        "Can psychology graduates apply for data science?",
    ),
    (
        "order",
        "What do Indians find most annoying in foreigners?",
        "What do foreigners find most annoying about Indians?",
    ),
]

SAME = [
    ("转账限额是五千元吗", "转账限额是5000元吗"),  # Chinese numerals read as numbers
    ("三百二十块可以吗", "320块可以吗"),
    ("花呗能不能分期", "花呗可以分期吗"),  # A-not-A is a question, not a negation
    ("是不是要先实名认证", "需要先实名认证吗"),
    ("星期三营业吗", "周三营业吗"),
    ("这两个有什么不同", "这两个有什么区别"),  # 不同 is not a negation
    ("How do I reset my password?", "How can I reset my password"),
    ("What is the best way to learn Python?", "How should I learn Python?"),
    ("QQ怎么改名", "qq如何改名字"),
    # a clause moved to the front is not a swap: nothing stays between the two parts
    ("Can I join the army if I wear glasses?", "If I wear glasses, can I join the army?"),
    (
        "What is the difference between apples and oranges?",
        "What is the difference between oranges and apples?",
    ),
]


@pytest.mark.parametrize(("guard", "a", "b"), TRAPS)
def test_trap_is_caught_by_its_guard(guard: str, a: str, b: str) -> None:
    result = check(a, b, GUARD_NAMES)
    assert guard in result.failed and not result.ok
    assert check(b, a, GUARD_NAMES).failed == result.failed  # symmetric


@pytest.mark.parametrize(("a", "b"), SAME)
def test_paraphrases_pass_every_guard(a: str, b: str) -> None:
    result = check(a, b, GUARD_NAMES)
    assert result.ok, result.failed
    assert result.passed == GUARD_NAMES


def test_only_the_named_guards_run() -> None:
    result = check("明天天气", "今天天气", ("numbers",))
    assert result.ok and result.passed == ("numbers",)


def test_number_and_negation_extraction() -> None:
    assert numbers("两万三千五百") == frozenset({"23500"})
    assert numbers("一下就好了") == frozenset()  # a lone 一 is not a number
    assert numbers("version 1.5, twenty users") == frozenset({"1.5", "20"})
    assert negations("不是不可以") % 2 == 0
    assert negations("I don't know") == 1


@pytest.mark.parametrize(
    ("seq", "swap"),
    [
        ([2, 1, 0], True),  # Y M X
        ([0, 1, 7, 3, 4, 5, 6, 2], True),  # P Y M X
        ([4, 2, 3, 0, 1], True),  # Y M XX
        ([0, 1, 2], False),  # the same order
        ([1, 0], False),  # two tokens exchanged with nothing between: a clause move
        ([3, 4, 5, 0, 1, 2], False),  # a block moved (rotation)
        ([2, 0, 1], False),
        ([1, 3, 0, 2], False),  # shuffled, not a swap
    ],
)
def test_swap_shape(seq: list[int], swap: bool) -> None:
    from hybrid_gateway.cache.semantic.guards import _is_swap

    assert _is_swap(seq) is swap


def test_order_needs_most_words_shared() -> None:
    # few shared words: not judged (the other guards and the threshold decide)
    assert check("我爱北京", "北京爱我们大家一起去玩吧好不好", ("order",)).ok
