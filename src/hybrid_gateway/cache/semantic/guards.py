"""Cheap checks that catch the classic near-miss traps an embedding scores as "the same".

Embedding models put "转账限额是5000吗" and "转账限额是50000吗", "how do I open an account" and
"how do I not open an account", "capital of France" and "capital of Germany" very close
together.  Each guard here compares one kind of fact that changes the answer and fails when the
two questions disagree on it.  They are pure functions of the two texts (Chinese and English),
a few microseconds each, run only on the nearest neighbour.

    numbers    the numbers differ (Arabic, full-width, Chinese numerals, English number words)
    dates      relative dates, weekdays, months differ (今天/明天, today/tomorrow, Monday, ...)
    negation   one question is negated and the other is not (不/没/未/别..., not/never/n't...);
               A-not-A questions (能不能, 是不是, 有没有) are questions, not negations
    entities   Latin-script names differ: the Latin tokens of Chinese text (iPhone, QQ, Excel),
               capitalised words inside an English sentence (France, Python)
    antonyms   what one question has and the other lacks is a pair of opposites: 上一句/下一句,
               买/卖, 男/女, buy/sell, before/after, upload/download
    order      the same words with two parts swapped around a part that stays (the PAWS
               pattern): 你喜欢我/我喜欢你, "X graduates apply for Y" / "Y graduates apply for X",
               "what do A find annoying in B" / "... do B find annoying about A"; a clause moved
               to the front or the back (nothing stays between) is not a swap
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

GUARD_NAMES: tuple[str, ...] = ("numbers", "dates", "negation", "entities", "antonyms", "order")

_DIGITS = {c: i for i, c in enumerate("零一二三四五六七八九")} | {"〇": 0, "两": 2, "俩": 2}
_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10_000, "亿": 100_000_000}
_EN_NUMBERS = {
    w: i
    for i, w in enumerate((
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
        "eighteen", "nineteen", "twenty",
    ))
} | {"thirty": 30, "forty": 40, "fifty": 50, "hundred": 100, "thousand": 1000,
     "million": 10**6}  # fmt: skip

_ARABIC = re.compile(r"\d+(?:[.,]\d+)*")
_CN_NUMERAL = re.compile(r"[零〇一二三四五六七八九两俩十百千万亿]+")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’]*")
_CJK = re.compile(r"[\u4e00-\u9fff]")
_LATIN_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9+#._-]*")
# "一" alone is mostly not a number (一下, 一个, 一直): a lone 一 is ignored.
_CN_NOT_NUMBER = {"一"}

_DATE_WORDS = (
    "今天", "明天", "昨天", "后天", "前天", "今日", "明日", "昨日", "今晚", "明晚", "昨晚",
    "今年", "明年", "去年", "前年", "后年", "本周", "下周", "上周", "这周", "本月", "下月",
    "上月", "这个月", "下个月", "上个月", "周一", "周二", "周三", "周四", "周五", "周六",
    "周日", "周末", "星期一", "星期二", "星期三", "星期四", "星期五", "星期六", "星期日",
    "星期天", "早上", "上午", "中午", "下午", "晚上", "凌晨",
)  # fmt: skip
_EN_DATE_WORDS = frozenset((
    "today", "tomorrow", "yesterday", "tonight", "monday", "tuesday", "wednesday", "thursday",
    "friday", "saturday", "sunday", "weekend", "january", "february", "march", "april", "may",
    "june", "july", "august", "september", "october", "november", "december", "morning",
    "afternoon", "evening", "night",
))  # fmt: skip

# Negators, after removing A-not-A question forms (能不能, 是不是, 有没有, 可不可以).
_A_NOT_A = re.compile(r"(\w)(?:不|没)\1|可不可以|是否|要不要")
_CN_NEGATION = re.compile(r"不|没|沒|未|别|勿|莫|无法|无")
# Words that contain a negator character without negating (不错 = good, 不同 = different, ...).
_CN_NOT_NEGATION = re.compile(
    r"不错|不过|不同|不少|不断|不久|不管|不然|不仅|不如|不得不|差不多|无论|无线|无人机|莫名|别人|别的|区别|"
    r"分别|特别|类别|级别|性别|别名|未来|没事"
)
_EN_NEGATION = frozenset((
    "not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "cannot", "without",
    "cant", "dont", "doesnt", "didnt", "isnt", "arent", "wasnt", "werent", "wont", "wouldnt",
    "shouldnt", "couldnt", "hasnt", "havent", "hadnt",
))  # fmt: skip
# Capitalised words that are not names when they start an English question or stand alone.
_EN_FUNCTION = frozenset((
    "i", "what", "why", "how", "when", "where", "who", "whom", "which", "whose", "is", "are",
    "was", "were", "do", "does", "did", "can", "could", "should", "would", "will", "shall",
    "may", "might", "must", "have", "has", "had", "the", "a", "an", "if", "in", "on", "at",
    "to", "for", "of", "and", "or", "but", "my", "your", "his", "her", "its", "our", "their",
    "this", "that", "these", "those", "there", "it", "you", "we", "they", "he", "she", "am",
    "be", "been", "please", "quora",
))  # fmt: skip

# Opposites that turn a question into another one when swapped.  Chinese: single characters
# (only the characters the two questions do not share are compared); English: whole words.
_CN_OPPOSITES = frozenset(frozenset(p) for p in (
    "上下", "前后", "左右", "买卖", "大小", "多少", "男女", "开关", "进出", "来去", "借还",
    "收发", "正反", "高低", "长短", "早晚", "新旧", "增减", "升降", "加减", "存取", "胖瘦",
    "冷热", "快慢", "内外", "输赢", "入出", "先后", "好坏", "真假", "哥弟", "姐妹", "爸妈",
    "父母", "东西", "南北", "春秋", "夏冬", "去回", "贵贱", "深浅", "远近", "轻重", "粗细",
    "难易", "生死", "得失", "甜苦",
))  # fmt: skip
_EN_OPPOSITES = frozenset(frozenset(p.split("/")) for p in (
    "buy/sell", "before/after", "upload/download", "up/down", "in/out", "increase/decrease",
    "open/close", "on/off", "start/stop", "min/max", "minimum/maximum", "import/export",
    "send/receive", "input/output", "positive/negative", "best/worst", "more/less", "high/low",
    "first/last", "add/remove", "enable/disable", "win/lose", "male/female", "husband/wife",
))  # fmt: skip


@dataclass(frozen=True, slots=True)
class GuardResult:
    """Which guards ran and which of them failed (named, so a hit can say why it was refused)."""

    passed: tuple[str, ...]
    failed: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.failed


def _normal(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


class _Parsed(NamedTuple):
    norm: str  # NFKC
    lower: str  # norm.lower()
    words: tuple[str, ...]  # _WORD.findall(lower)


@lru_cache(maxsize=4096)
def _parsed(text: str) -> _Parsed:
    """What every guard reads of a text, done once per text (not once per guard: a
    2,000-character question was normalised five times and split into words four)."""
    norm = _normal(text)
    lower = norm.lower()
    return _Parsed(norm, lower, tuple(_WORD.findall(lower)))


def _cn_number(run: str) -> int | None:
    """A Chinese numeral run as an int (三百二十 -> 320, 两万 -> 20000); None if unparsable."""
    if all(c in _DIGITS for c in run):
        return int("".join(str(_DIGITS[c]) for c in run))
    total, section, digit = 0, 0, 0
    for char in run:
        if char in _DIGITS:
            digit = _DIGITS[char]
        elif char in ("万", "亿"):
            section = (section + digit) * _UNITS[char]
            total += section
            section, digit = 0, 0
        else:
            section += (digit or 1) * _UNITS[char]
            digit = 0
    return total + section + digit


@lru_cache(maxsize=4096)
def numbers(text: str) -> frozenset[str]:
    parsed = _parsed(text)
    norm = parsed.norm
    found = {n.replace(",", "") for n in _ARABIC.findall(norm)}
    # (the Chinese patterns match no ASCII character: an ASCII text skips their scans)
    for run in () if norm.isascii() else _CN_NUMERAL.findall(norm):
        if run in _CN_NOT_NUMBER:
            continue
        value = _cn_number(run)
        if value is not None:
            found.add(str(value))
    for word in parsed.words:
        if word in _EN_NUMBERS:
            found.add(str(_EN_NUMBERS[word]))
    return frozenset(found)


@lru_cache(maxsize=4096)
def dates(text: str) -> frozenset[str]:
    parsed = _parsed(text)
    norm = parsed.norm
    # 星期三 and 周三 name one day, as do 星期日, 星期天 and 周日: fold them to the 周 form.
    found = {
        "周日" if w in {"星期日", "星期天"} else w.replace("星期", "周")
        for w in _DATE_WORDS
        if w in norm
    }
    found |= {w for w in parsed.words if w in _EN_DATE_WORDS}
    return frozenset(found)


@lru_cache(maxsize=4096)
def negations(text: str) -> int:
    parsed = _parsed(text)
    count = 0
    if not parsed.norm.isascii():
        cn = _CN_NOT_NEGATION.sub("", _A_NOT_A.sub("", parsed.norm))
        count = len(_CN_NEGATION.findall(cn))
    words = [
        w.replace("'", "").replace("’", "") if "'" in w or "’" in w else w for w in parsed.words
    ]
    count += sum(1 for w in words if w in _EN_NEGATION)
    return count


@lru_cache(maxsize=4096)
def entities(text: str) -> frozenset[str]:
    norm = _parsed(text).norm
    if not norm.isascii() and _CJK.search(norm):
        # Chinese text: every Latin token in it is a name (iPhone, QQ, Excel)
        return frozenset(t.lower().rstrip("._-") for t in _LATIN_TOKEN.findall(norm))
    found = set()
    for i, token in enumerate(_WORD.findall(norm)):
        if token[0].isupper() and token.lower() not in _EN_FUNCTION and (i > 0 or token.isupper()):
            found.add(token.lower())
    return frozenset(found)


def _numbers_agree(a: str, b: str) -> bool:
    return numbers(a) == numbers(b)


def _dates_agree(a: str, b: str) -> bool:
    return dates(a) == dates(b)


def _negation_agrees(a: str, b: str) -> bool:
    return negations(a) % 2 == negations(b) % 2


def _entities_agree(a: str, b: str) -> bool:
    return entities(a) == entities(b)


def _no_opposites(a: str, b: str) -> bool:
    pa, pb = _parsed(a), _parsed(b)
    na, nb = pa.lower, pb.lower
    if not (na.isascii() or nb.isascii()):  # (Chinese opposites need Chinese on both sides)
        only_a, only_b = set(_CJK.findall(na)) - set(nb), set(_CJK.findall(nb)) - set(na)
        if any(frozenset((x, y)) in _CN_OPPOSITES for x in only_a for y in only_b):
            return False
    wa, wb = set(pa.words), set(pb.words)
    return not any(frozenset((x, y)) in _EN_OPPOSITES for x in wa - wb for y in wb - wa)


# Tokens the order guard ignores: Chinese particles and English function words move freely
# in a paraphrase ("for"/"in"/"about", 的/了/吗); pronouns are kept (你/我 is the swap).
_ORDER_SKIP_CN = frozenset("的了吗呢啊吧呀么嘛哦哈是")
_ORDER_SKIP_EN = _EN_FUNCTION - {
    "i",
    "you",
    "we",
    "they",
    "he",
    "she",
    "my",
    "your",
    "his",
    "her",
    "our",
    "their",
}
_ORDER_TOKEN = re.compile(r"[a-z0-9]+|[\u4e00-\u9fff]")
# The swap must involve most of both questions: anchors (tokens once in each) cover at least
# this share of the longer one's tokens, and there are at least 3 of them.
_ORDER_COVER = 0.6


@lru_cache(maxsize=4096)
def _order_tokens(text: str) -> tuple[str, ...]:
    return tuple(
        t for t in _ORDER_TOKEN.findall(_parsed(text).lower)
        if t not in _ORDER_SKIP_CN and t not in _ORDER_SKIP_EN
    )  # fmt: skip


def _is_swap(seq: list[int]) -> bool:
    """``seq`` (a permutation of 0..n-1) is the identity with two increasing runs of
    consecutive values exchanged around a non-empty run that stays: P + Y + M + X + S."""
    n = len(seq)
    lo = 0
    while lo < n and seq[lo] == lo:
        lo += 1
    hi = n - 1
    while hi >= 0 and seq[hi] == hi:
        hi -= 1
    if lo >= hi:
        return False
    window = seq[lo : hi + 1]  # values lo..hi, starting with Y (whose first is not lo)
    # X ends the window and starts at lo; Y starts the window and ends at hi
    x_len = next((k for k in range(1, len(window)) if window[-k] == lo), 0)
    y_len = next((k for k in range(1, len(window)) if window[k - 1] == hi), 0)
    if not x_len or not y_len or x_len + y_len >= len(window):
        return False
    expected = (
        list(range(hi - y_len + 1, hi + 1))
        + list(range(lo + x_len, hi - y_len + 1))
        + list(range(lo, lo + x_len))
    )
    return window == expected


def _order_kept(a: str, b: str) -> bool:
    ta, tb = _order_tokens(a), _order_tokens(b)
    if ta == tb:
        return True
    ca, cb = Counter(ta), Counter(tb)  # (a count per token was quadratic: 1.6 ms at 2 KB)
    anchors = [t for t in ta if ca[t] == 1 and cb.get(t) == 1]
    if len(anchors) < 3 or len(anchors) < _ORDER_COVER * max(len(ta), len(tb)):
        return True
    rank = {t: i for i, t in enumerate(anchors)}
    return not _is_swap([rank[t] for t in tb if t in rank])


GUARDS: Mapping[str, Callable[[str, str], bool]] = {
    "numbers": _numbers_agree,
    "dates": _dates_agree,
    "negation": _negation_agrees,
    "entities": _entities_agree,
    "antonyms": _no_opposites,
    "order": _order_kept,
}


def check(a: str, b: str, names: tuple[str, ...]) -> GuardResult:
    """Run the named guards on two questions; all of them run, so the record names every failure."""
    passed: list[str] = []
    failed: list[str] = []
    for name in names:
        (passed if GUARDS[name](a, b) else failed).append(name)
    return GuardResult(tuple(passed), tuple(failed))
