"""Compose a workload from the real data: which questions, in what order, asked again or not.

A build first plans its slots, exact counts shuffled by the seed: each slot is *simple* (an FAQ
question) or *complex* (from the complex pool), and *fresh* (a new question), a *verbatim* repeat,
a *paraphrase* (the label-1 partner of an earlier question: same group) or a *trap* (the label-0
partner of an earlier question: a new group with ``trap_of`` set).  Then it fills the slots in
order; a repeat or trap slot that has nothing earlier to refer to swaps with the next fresh slot of
its class.  Every rule here is written out in docs/workload.md.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .arrivals import Arrival, ArrivalSpec, make_arrivals
from .library import Candidate, Library
from .near_duplicates import NearDuplicates
from .schema import COMPLEX, SIMPLE, Labels, WorkloadItem
from .sources import (
    ASSUMED,
    Prompt,
    load_azure_conv,
)

DEFAULT_KIND = "default"
HARD_KIND = "hard"
KINDS = (DEFAULT_KIND, HARD_KIND)

FRESH, VERBATIM, PARAPHRASE, TRAP = "fresh", "verbatim", "paraphrase", "trap"

# Source weights inside each pool (a source that runs out leaves the draw to the others).
EN_SIMPLE = {"banking77": 0.5, "qqp": 0.5}
ZH_SIMPLE = {"lcqmc": 0.25, "bq": 0.25, "afqmc": 0.25, "oppo_xiaobu": 0.25}
EN_COMPLEX = {
    "mmlu": 0.4,
    "routerbench_arc_challenge": 0.1,
    "routerbench_winograde": 0.1,
    "routerbench_mbpp": 0.1,
    "arena": 0.15,
    "math500": 0.1,
}
ZH_COMPLEX = {"alignbench": 0.5, "cmath": 0.5}
HARD = {
    "mmlu": 0.45,
    "routerbench_arc_challenge": 0.15,
    "routerbench_winograde": 0.15,
    "routerbench_mbpp": 0.1,
    "arena": 0.15,
}
MEASURED_SOURCES = frozenset(HARD)
COMPLEX_SOURCES = frozenset(EN_COMPLEX) | frozenset(ZH_COMPLEX)
# Default kind: a measured complex-pool draw comes from the rows the light model got wrong with
# this probability, else from the rows it got right (each stratum keeps its natural mix of
# heavy-right and heavy-wrong), so the pool leans hard without being cherry-picked.
LIGHT_FAILS_SHARE = 0.75
MIN_OUTPUT_TOKENS = 8


class BuildError(ValueError):
    """The options cannot be met (bad values, or not enough source questions)."""


@dataclass(frozen=True, slots=True)
class BuildOptions:
    size: int = 1000
    kind: str = DEFAULT_KIND
    complex_share: float = 0.2
    repeat_rate: float = 0.3
    trap_rate: float = 0.05
    zh_share: float = 0.5
    stream_share: float = 0.3
    tenants: int = 1
    arrivals: ArrivalSpec = field(default_factory=ArrivalSpec)
    seed: int = 7
    zh_simple: tuple[str, ...] = ()  # the Chinese FAQ sources drawn from, evenly (): all four
    # skip a question that nearly repeats (word-bigram Dice >= this) an earlier one the data
    # does not relate it to (near_duplicates.py); 0: off
    near_duplicate_cut: float = 0.0

    def validate(self) -> None:
        shares = ("complex_share", "repeat_rate", "trap_rate", "zh_share", "stream_share",
                  "near_duplicate_cut")  # fmt: skip
        for name in shares:
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise BuildError(f"--{name.replace('_', '-')} must be within [0, 1]")
        if self.size < 1 or self.tenants < 1:
            raise BuildError("--size and --tenants must be at least 1")
        if self.kind not in KINDS:
            raise BuildError(f"--kind must be one of {', '.join(KINDS)}")
        if unknown := sorted(set(self.zh_simple) - set(ZH_SIMPLE)):
            raise BuildError(f"--zh-sources: {', '.join(unknown)}: one of {', '.join(ZH_SIMPLE)}")

    def as_meta(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "size": self.size,
            "complex_share": self.complex_share,
            "repeat_rate": self.repeat_rate,
            "trap_rate": self.trap_rate,
            "zh_share": self.zh_share,
            "stream_share": self.stream_share,
            "tenants": self.tenants,
            "arrivals": str(self.arrivals),
            "seed": self.seed,
            **({"zh_simple": list(self.zh_simple)} if self.zh_simple else {}),
            **({"near_duplicate_cut": self.near_duplicate_cut} if self.near_duplicate_cut else {}),
        }


@dataclass(frozen=True, slots=True)
class Slot:
    complex_pool: bool
    kind: str  # FRESH, VERBATIM, PARAPHRASE or TRAP


def plan_slots(options: BuildOptions, rng: random.Random) -> list[Slot]:
    """Exact slot counts for the options, shuffled; raises BuildError when they cannot fit."""
    size = options.size
    hard = options.kind == HARD_KIND
    repeats = round(size * options.repeat_rate)
    paraphrases = 0 if hard else repeats // 2  # measured prompts have no labelled paraphrases
    traps = 0 if hard else round(size * options.trap_rate)
    verbatim = repeats - paraphrases
    n_complex = size if hard else round(size * options.complex_share)
    complex_verbatim = round(verbatim * n_complex / size)
    simple_fresh = size - n_complex - (verbatim - complex_verbatim) - paraphrases - traps
    if simple_fresh < paraphrases + traps or (n_complex and n_complex <= complex_verbatim):
        raise BuildError(
            "--repeat-rate and --trap-rate leave too few fresh questions to refer to; lower them"
        )
    slots = (
        [Slot(True, FRESH)] * (n_complex - complex_verbatim)
        + [Slot(True, VERBATIM)] * complex_verbatim
        + [Slot(False, FRESH)] * simple_fresh
        + [Slot(False, VERBATIM)] * (verbatim - complex_verbatim)
        + [Slot(False, PARAPHRASE)] * paraphrases
        + [Slot(False, TRAP)] * traps
    )
    rng.shuffle(slots)
    return slots


@dataclass(slots=True)
class _Asked:
    """A question already in the workload, and its unused labelled partner if any."""

    text: str
    labels: Labels
    max_tokens: int
    complex_pool: bool
    partner: str | None = None
    same: bool = False


@dataclass(slots=True)
class _Composer:
    """Fills slots in order; holds what has been asked so far (one build's state, never global)."""

    options: BuildOptions
    library: Library
    rng: random.Random
    remaining: Counter[str]
    asked: dict[bool, list[_Asked]] = field(default_factory=lambda: {True: [], False: []})
    open_pairs: dict[bool, list[_Asked]] = field(default_factory=lambda: {True: [], False: []})
    groups: dict[str, str] = field(default_factory=dict)  # question text -> group
    joined: set[str] = field(default_factory=set)  # fresh texts the data put in an earlier group
    group_count: int = 0
    near: NearDuplicates | None = None  # with options.near_duplicate_cut

    def __post_init__(self) -> None:
        if self.options.near_duplicate_cut > 0:
            self.near = NearDuplicates(self.options.near_duplicate_cut)

    def _unrelated_repeat(self, text: str, group: str | None = None) -> bool:
        """With the cut on: ``text`` nearly repeats an earlier question outside ``group`` and
        the group the data's links put it in."""
        if self.near is None:
            return False
        related = {g for g in (group, self.library.known.group_of(text)) if g}
        return self.near.conflicts(text, related)

    def make(self, slot: Slot) -> tuple[str, Labels, int] | None:
        if slot.kind == FRESH:
            return self._fresh(slot.complex_pool)
        if slot.kind == VERBATIM:
            return self._verbatim(slot.complex_pool)
        return self._partner(same=slot.kind == PARAPHRASE)

    def _lang(self) -> str:
        hard = self.options.kind == HARD_KIND
        return "en" if hard or self.rng.random() >= self.options.zh_share else "zh"

    def _pools(self, complex_pool: bool) -> list[Mapping[str, float]]:
        if self.options.kind == HARD_KIND:
            return [HARD]
        chosen = self.options.zh_simple
        zh_simple = {name: 1 / len(chosen) for name in chosen} if chosen else ZH_SIMPLE
        en, zh = (EN_COMPLEX, ZH_COMPLEX) if complex_pool else (EN_SIMPLE, zh_simple)
        return [zh, en] if self._lang() == "zh" else [en, zh]

    def _p_same(self) -> float:
        need_same = max(0, self.remaining[PARAPHRASE] - len(self.open_pairs[True]))
        need_different = max(0, self.remaining[TRAP] - len(self.open_pairs[False]))
        return (need_same + 0.5) / (need_same + need_different + 1.0)

    def _fresh(self, complex_pool: bool) -> tuple[str, Labels, int] | None:
        for pool in self._pools(complex_pool):
            for _ in range(50):  # skip texts already asked under another group
                card = self.library.draw(pool, self.rng, self._p_same())
                if card is None:
                    break
                text = card.prompt.text
                if text and text not in self.groups and not self._unrelated_repeat(text):
                    return self._remember(card, complex_pool)
        return None

    def _remember(self, card: Candidate, complex_pool: bool) -> tuple[str, Labels, int]:
        prompt = card.prompt
        known = self.library.known.group_of(prompt.text)  # the data says: asked before
        if known is not None:
            self.joined.add(prompt.text)
            self._assign(prompt.text, known)
        labels = _labels(prompt, known or self._new_group(prompt.text))
        asked = _Asked(
            prompt.text, labels, prompt.max_tokens, complex_pool, card.partner, card.same
        )
        self.asked[complex_pool].append(asked)
        if card.partner is not None:
            self.open_pairs[card.same].append(asked)
        return prompt.text, labels, prompt.max_tokens

    def _new_group(self, text: str) -> str:
        self.group_count += 1
        return self._assign(text, f"g{self.group_count:06d}")

    def _assign(self, text: str, group: str) -> str:
        """``text`` is asked in ``group``: kept by its text, and normalised for the data's
        paraphrase links (``known_paraphrases.py``)."""
        self.groups[text] = group
        self.library.known.asked(text, group)
        if self.near is not None:
            self.near.add(text, group)
        return group

    def _verbatim(self, complex_pool: bool) -> tuple[str, Labels, int] | None:
        earlier = _by_lang(self.asked[complex_pool], self._lang())
        if not earlier:
            return None
        asked = self.rng.choice(earlier)
        return asked.text, asked.labels, asked.max_tokens

    def _partner(self, same: bool) -> tuple[str, Labels, int] | None:
        lang = self._lang()
        while self.open_pairs[same]:
            candidates = _by_lang(self.open_pairs[same], lang)
            asked = self.rng.choice(candidates)
            self.open_pairs[same].remove(asked)
            text = (asked.partner or "").strip()
            if not text or text == asked.text:
                continue
            if text not in self.groups and self._unrelated_repeat(text, asked.labels.group):
                continue  # it nearly repeats a third question, whose relation nobody labelled
            joined = asked.text in self.joined or text in self.joined
            if same and self.groups.get(text, asked.labels.group) == asked.labels.group and not (
                joined and text in self.groups  # asked already, grouped by the data's links
            ):
                self._assign(text, asked.labels.group)
                return text, asked.labels, asked.max_tokens
            if not same and text not in self.groups:
                return self._trap(text, asked)
        return None

    def _trap(self, text: str, of: _Asked) -> tuple[str, Labels, int]:
        source, lang = of.labels.source, of.labels.lang
        prompt = Prompt(text, source, source, lang, light_ok=True, heavy_ok=True, outcome=ASSUMED)
        known = self.library.known.group_of(text)  # a paraphrase of another question asked
        if known is None or known == of.labels.group:  # (the data contradicting itself: not)
            group = self._new_group(text)
        else:
            group = self._assign(text, known)
        labels = _labels(prompt, group, trap_of=of.labels.group)
        self.asked[False].append(_Asked(text, labels, of.max_tokens, complex_pool=False))
        return text, labels, of.max_tokens


def _by_lang(asked: list[_Asked], lang: str) -> list[_Asked]:
    return [a for a in asked if a.labels.lang == lang] or asked


def _labels(prompt: Prompt, group: str, trap_of: str | None = None) -> Labels:
    return Labels(
        light_ok=prompt.light_ok,
        heavy_ok=prompt.heavy_ok,
        # the definition: complex = the light model's answer would not be good enough
        complexity=SIMPLE if prompt.light_ok else COMPLEX,
        category=prompt.category,
        source=prompt.source,
        group=group,
        lang=prompt.lang,
        outcome=prompt.outcome,
        trap_of=trap_of,
    )


def build(options: BuildOptions, data: Path) -> list[WorkloadItem]:
    """The workload for ``options`` from the data in ``data``: same options, same items."""
    return build_noting_drift(options, data)[0]


def build_noting_drift(
    options: BuildOptions, data: Path
) -> tuple[list[WorkloadItem], dict[str, int]]:
    """``build``, and where the mix drifts: each source (or preferred part of one) that ran
    out, with the item at which it did.  After that item its draws go to the pool's other
    sources, so a later stretch of the workload has another mix than an earlier one."""
    options.validate()
    seed = options.seed
    slots = plan_slots(options, random.Random(f"{seed}:plan"))
    stratified = MEASURED_SOURCES if options.kind == DEFAULT_KIND else frozenset()
    library = Library(data, stratified, LIGHT_FAILS_SHARE)
    composer = _Composer(options, library, random.Random(f"{seed}:pick"), Counter())
    composer.remaining.update(slot.kind for slot in slots)
    questions = [_fill(slots, index, composer) for index in range(len(slots))]
    arrivals = make_arrivals(options.arrivals, options.size, random.Random(f"{seed}:arrive"), data)
    return _items(options, questions, arrivals, data), dict(library.exhausted)


def _items(
    options: BuildOptions,
    questions: list[tuple[str, Labels, int]],
    arrivals: list[Arrival],
    data: Path,
) -> list[WorkloadItem]:
    output_tokens = [row.output_tokens for row in load_azure_conv(data)]
    rng = random.Random(f"{options.seed}:item")
    items: list[WorkloadItem] = []
    for index, (question, arrival) in enumerate(zip(questions, arrivals, strict=True)):
        text, labels, max_tokens = question
        tenant = f"t{rng.randrange(options.tenants)}"
        stream = rng.random() < options.stream_share
        sampled = rng.choice(output_tokens)
        wanted = sampled if arrival.output_tokens is None else arrival.output_tokens
        expected = min(max(wanted, MIN_OUTPUT_TOKENS), max_tokens)
        items.append(
            WorkloadItem(
                id=f"w{index + 1:06d}",
                arrival_ms=arrival.offset_ms,
                tenant=tenant,
                messages=({"role": "user", "content": text},),
                max_tokens=max_tokens,
                expected_output_tokens=expected,
                stream=stream,
                labels=labels,
            )
        )
    return items


def _fill(slots: list[Slot], index: int, composer: _Composer) -> tuple[str, Labels, int]:
    """Fill ``slots[index]``; a slot with nothing to refer to yet swaps with a later fresh one."""
    slot = slots[index]
    composer.library.at = index + 1
    made = composer.make(slot)
    if made is None and slot.kind != FRESH:
        fresh = Slot(slot.complex_pool, FRESH)
        later = next((j for j in range(index + 1, len(slots)) if slots[j] == fresh), None)
        if later is not None:
            slots[index], slots[later] = fresh, slot
            slot = fresh
        else:  # nothing fresh left to swap with: degrade to a verbatim repeat, then a new question
            slot = Slot(slot.complex_pool, VERBATIM)
            made = composer.make(slot)
            slot = slot if made is not None else fresh
        made = made or composer.make(slot)
    if made is None:
        raise BuildError(f"ran out of source questions at item {index + 1}; lower --size")
    composer.remaining[slot.kind] -= 1
    return made
