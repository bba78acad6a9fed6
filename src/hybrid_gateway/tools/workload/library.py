"""The source questions a build draws from: loaded on first use, split into decks, drawn in
seeded random order (``builder.py``'s composer asks; every rule is in docs/workload.md)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .known_paraphrases import KnownParaphrases
from .sources import PAIR_LOADERS, PROMPT_LOADERS, Pair, Prompt

__all__ = ["Candidate", "Library"]


@dataclass(frozen=True, slots=True)
class Candidate:
    prompt: Prompt
    partner: str | None = None
    same: bool = False


class Deck:
    """Draw without replacement, in seeded random order."""

    def __init__(self, cards: Sequence[Candidate]) -> None:
        self._cards = list(cards)

    def draw(self, rng: random.Random) -> Candidate | None:
        if not self._cards:
            return None
        index = rng.randrange(len(self._cards))
        self._cards[index], self._cards[-1] = self._cards[-1], self._cards[index]
        return self._cards.pop()


class Library:
    """The source questions, loaded on first use and split into decks."""

    def __init__(
        self, data: Path, stratified: frozenset[str] = frozenset(), light_fails_share: float = 0.5
    ) -> None:
        """``stratified``: the measured sources whose draws prefer the rows the light model
        got wrong with probability ``light_fails_share``."""
        self._data = data
        self._stratified = stratified
        self._light_fails_share = light_fails_share
        self._decks: dict[tuple[str, str], Deck] = {}
        self.known = KnownParaphrases()  # the label-1 links of the pair sources loaded
        # Where the mix starts to drift: the item (1-based) at which a source ("cmath"), or
        # the part of one that a draw preferred ("mmlu/light_fails"), was first found empty.
        self.exhausted: dict[str, int] = {}
        self.at = 0  # the item being filled

    def draw(
        self, weights: Mapping[str, float], rng: random.Random, p_same: float
    ) -> Candidate | None:
        names = list(weights)
        while names:
            name = rng.choices(names, [weights[n] for n in names])[0]
            preferred = self._preferred_part(name, rng, p_same)
            for part in (preferred, _OTHER_PART[preferred]):
                card = self._deck(name, part).draw(rng)
                if card is not None:
                    return card
                if part != "all":
                    self.exhausted.setdefault(f"{name}/{part}", self.at)
            self.exhausted.setdefault(name, self.at)
            names.remove(name)
        return None

    def _preferred_part(self, name: str, rng: random.Random, p_same: float) -> str:
        if name in PAIR_LOADERS:
            return "same" if rng.random() < p_same else "different"
        if name in self._stratified:
            return "light_fails" if rng.random() < self._light_fails_share else "light_ok"
        return "all"

    def _deck(self, name: str, part: str) -> Deck:
        if (name, part) not in self._decks:
            self._load(name)
        return self._decks[(name, part)]

    def _load(self, name: str) -> None:
        if name in PAIR_LOADERS:
            pairs: list[Pair] = PAIR_LOADERS[name](self._data)
            self.known.add(pairs)
            cards = [Candidate(p.prompt, p.partner, p.same) for p in pairs]
            self._decks[(name, "same")] = Deck([c for c in cards if c.same])
            self._decks[(name, "different")] = Deck([c for c in cards if not c.same])
            return
        cards = [Candidate(prompt) for prompt in PROMPT_LOADERS[name](self._data)]
        self._decks[(name, "all")] = Deck(cards)
        self._decks[(name, "light_fails")] = Deck([c for c in cards if not c.prompt.light_ok])
        self._decks[(name, "light_ok")] = Deck([c for c in cards if c.prompt.light_ok])


_OTHER_PART = {
    "same": "different",
    "different": "same",
    "light_fails": "light_ok",
    "light_ok": "light_fails",
    "all": "all",
}
