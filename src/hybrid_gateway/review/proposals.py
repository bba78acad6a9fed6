"""Concrete config changes for a cluster of flagged requests, smallest first.

For the requests of a cluster that a different lane would have served better (``want``):

- **a keyword** (``add_keyword`` / ``new_rule``): keywords distinctive of the cluster
  (``keywords.py``) added to an existing keywords-only rule for the wanted lane that fires
  before the rule that sent them, or else a new rule with them, placed just before that rule
  (or after the rules, when the classifier or the default lane sent them);
- **removing a keyword** (``remove_keyword``): when most of the cluster matched one keyword of
  the rule that sent them, that keyword is dropped (the rule itself, if it was its only one);
- **a threshold move** (``threshold``): when the classifier sent them, the threshold that
  puts all of them on the other side;
- **a category gate** (``add_gate`` / ``remove_gate``, ``gate_proposals``): by the category
  the requests declared (the request log's ``category`` column), across all flagged requests
  whatever their cluster (one category holds questions of many meanings): a category that at
  least ``GATE_MIN_FLAGGED`` light answers wanting the complex lane declared, more than heavy
  answers rated too slow, is added to ``routing.gates.heavy_categories``; a gated category
  whose flagged requests are mostly heavy answers rated too slow, sent by its gate, is taken
  out.  The replay shows what else the gate moves (the category's unflagged requests).

Each proposal is a list of ``Edit`` values applied to the config file's text by
``routing/config_edit.py`` (comments and layout kept), both for the replay and for ``--apply``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from hybrid_gateway.observability.log_rows import CATEGORY_CHARS
from hybrid_gateway.review.collect import Flagged, Want
from hybrid_gateway.review.keywords import Keyword, choose
from hybrid_gateway.routing.config_edit import delete_item, insert_item, set_value
from hybrid_gateway.routing.router import CLASSIFIER_RULE
from hybrid_gateway.routing.settings import RoutingConfig, RuleConfig

Op = Literal["insert_rule", "set_keywords", "delete_rule", "set_threshold", "set_gates"]
Kind = Literal["add_keyword", "new_rule", "remove_keyword", "threshold", "add_gate", "remove_gate"]
_RULES = ("routing", "rules")
_GATES = ("routing", "gates", "heavy_categories")
# Flagged requests of one category, wanting one direction, needed to propose its gate: one
# complaint is an anecdote, and a gate moves the whole category.
GATE_MIN_FLAGGED = 2


@dataclass(frozen=True, slots=True)
class Edit:
    op: Op
    index: int = -1  # the rule's position (rules ops)
    value: Any = None

    def as_json(self) -> dict[str, Any]:
        return {"op": self.op, "index": self.index, "value": self.value}


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """The config text with ``edits`` applied in order."""
    for edit in edits:
        if edit.op == "insert_rule":
            text = insert_item(text, _RULES, edit.index, edit.value)
        elif edit.op == "delete_rule":
            text = delete_item(text, _RULES, edit.index)
        elif edit.op == "set_keywords":
            text = set_value(text, (*_RULES, edit.index, "when", "keywords_any"), edit.value)
        elif edit.op == "set_gates":
            text = set_value(text, _GATES, edit.value)
        else:
            text = set_value(text, ("routing", "classifier", "threshold"), edit.value)
    return text


@dataclass(frozen=True, slots=True)
class Proposal:
    kind: Kind
    title: str
    edits: tuple[Edit, ...]
    clusters: tuple[int, ...] = field(default=())
    keywords: tuple[Keyword, ...] = ()

    def key(self) -> str:
        return repr([e.as_json() for e in self.edits])


def _lane(want: Want, routing: RoutingConfig) -> str:
    return routing.complex_lane if want == "complex" else routing.simple_lane


def _keywords_only(rule: RuleConfig) -> bool:
    when = rule.when.model_dump(exclude={"keywords_any"})
    return bool(rule.when.keywords_any) and all(v in (None, ()) for v in when.values())


def _position(rule: str | None, routing: RoutingConfig) -> int:
    """Where a rule catching these must go: before the rule that sent them, else last."""
    names = [r.name for r in routing.rules]
    return names.index(rule) if rule in names else len(names)


def keyword_proposal(
    clusters: tuple[int, ...],
    group: Sequence[Flagged],
    others: Sequence[str],
    routing: RoutingConfig,
) -> Proposal | None:
    want = group[0].want
    assert want is not None
    texts = [f.request.prompt or "" for f in group]
    chosen = choose(texts, others)
    if not chosen:
        return None
    lane = _lane(want, routing)
    words = [k.text for k in chosen]
    at = min(_position(f.request.rule, routing) for f in group)
    for j, rule in enumerate(routing.rules[:at]):
        if rule.lane == lane and _keywords_only(rule):
            merged = [
                *rule.when.keywords_any,
                *(w for w in words if w not in rule.when.keywords_any),
            ]
            title = f"add {_quoted(words)} to rule {rule.name} (-> {lane})"
            edit = Edit("set_keywords", j, merged)
            return Proposal("add_keyword", title, (edit,), clusters, tuple(chosen))
    name = f"misroutes-{lane}-{_slug(words[0])}"
    rule_value = {"name": name, "when": {"keywords_any": words}, "lane": lane}
    where = (
        f"before rule {routing.rules[at].name}" if at < len(routing.rules) else "after the rules"
    )
    title = f"new rule {name}: keywords {_quoted(words)} -> {lane}, {where}"
    return Proposal("new_rule", title, (Edit("insert_rule", at, rule_value),), clusters,
                    tuple(chosen))  # fmt: skip


def removal_proposals(
    clusters: tuple[int, ...], group: Sequence[Flagged], routing: RoutingConfig
) -> list[Proposal]:
    want = group[0].want
    assert want is not None
    sender, count = Counter(f.request.rule for f in group).most_common(1)[0]
    names = [r.name for r in routing.rules]
    if sender not in names or count * 2 < len(group):
        return []
    index = names.index(sender)
    rule = routing.rules[index]
    if rule.lane == _lane(want, routing) or not rule.when.keywords_any:
        return []
    texts = [(f.request.prompt or "").lower() for f in group]
    out = []
    for keyword in rule.when.keywords_any:
        if sum(1 for t in texts if keyword.lower() in t) * 2 < len(texts):
            continue
        rest = [k for k in rule.when.keywords_any if k != keyword]
        if rest:
            edit = Edit("set_keywords", index, rest)
            title = f"remove {_quoted([keyword])} from rule {rule.name}"
        else:
            edit = Edit("delete_rule", index)
            title = f"delete rule {rule.name} (its only keyword {_quoted([keyword])} catches them)"
        out.append(Proposal("remove_keyword", title, (edit,), clusters))
    return out


def threshold_proposal(
    clusters: tuple[int, ...], group: Sequence[Flagged], routing: RoutingConfig
) -> Proposal | None:
    if routing.classifier is None:
        return None
    # ``classifier`` or ``classifier@vN`` (a versioned model from learning.router_update)
    scores = [f.request.score for f in group
              if (f.request.rule or "").partition("@")[0] == CLASSIFIER_RULE
              and f.request.score is not None]  # fmt: skip
    if not scores or len(scores) * 2 < len(group):
        return None
    current = routing.classifier.threshold
    if group[0].want == "complex":
        new = math.floor(min(scores) * 100) / 100  # at or below every flagged score
        if not 0 < new < current:
            return None
    else:
        new = math.floor(max(scores) * 100) / 100 + 0.01  # above every flagged score
        if not current < new <= 1:
            return None
    new = round(new, 4)
    title = f"classifier threshold {current:g} -> {new:g}"
    return Proposal("threshold", title, (Edit("set_threshold", value=new),), clusters)


def gate_proposals(
    members: Sequence[tuple[int, Flagged]], routing: RoutingConfig
) -> list[Proposal]:
    """Category gates to add or remove, from every flagged request (with its cluster's
    number) that declared a category."""
    gated = list(routing.gates.heavy_categories) if routing.gates is not None else []
    by_category: dict[str, list[tuple[int, Flagged]]] = {}
    for number, f in members:
        category = f.request.category
        # A category at the column's bound may have been cut: a gate on it would match nothing.
        if f.want is not None and category is not None and len(category) < CATEGORY_CHARS:
            by_category.setdefault(category, []).append((number, f))
    out: list[Proposal] = []
    for category, group in sorted(by_category.items()):
        # light answers too weak / heavy answers, sent by this gate, too slow
        weak = [n for n, f in group if f.want == "complex"]
        slow = [n for n, f in group if f.want == "simple" and f.request.rule == f"gate:{category}"]
        if category not in gated and len(weak) >= GATE_MIN_FLAGGED and len(weak) > len(slow):
            title = (f"gate category {_quoted([category])} to {routing.complex_lane} "
                     "(routing.gates.heavy_categories)")  # fmt: skip
            edit = Edit("set_gates", value=[*gated, category])
            out.append(Proposal("add_gate", title, (edit,), tuple(sorted(set(weak)))))
        elif category in gated and len(slow) >= GATE_MIN_FLAGGED and len(slow) > len(weak):
            title = f"remove category {_quoted([category])} from routing.gates.heavy_categories"
            edit = Edit("set_gates", value=[c for c in gated if c != category])
            out.append(Proposal("remove_gate", title, (edit,), tuple(sorted(set(slow)))))
    return out


def propose(
    clusters: tuple[int, ...],
    members: Sequence[Flagged],
    others: Sequence[str],
    routing: RoutingConfig,
) -> list[Proposal]:
    """Every candidate change for one cluster (the replay ranks them)."""
    wants = Counter(f.want for f in members if f.want is not None)
    if not wants:
        return []
    want = sorted(wants.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    group = [f for f in members if f.want == want]
    out: list[Proposal] = []
    found = keyword_proposal(clusters, group, others, routing)
    if found is not None:
        out.append(found)
    out += removal_proposals(clusters, group, routing)
    moved = threshold_proposal(clusters, group, routing)
    if moved is not None:
        out.append(moved)
    return out


def merge(proposals: Sequence[Proposal]) -> list[Proposal]:
    """One proposal per distinct edit list, naming every cluster that led to it."""
    by_key: dict[str, Proposal] = {}
    for p in proposals:
        seen = by_key.get(p.key())
        if seen is None:
            by_key[p.key()] = p
        else:
            clusters = tuple(sorted({*seen.clusters, *p.clusters}))
            by_key[p.key()] = Proposal(seen.kind, seen.title, seen.edits, clusters, seen.keywords)
    return list(by_key.values())


def _quoted(words: Sequence[str]) -> str:
    return ", ".join(f'"{w}"' for w in words)


def _slug(text: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in text).split())[:40] or "keyword"
