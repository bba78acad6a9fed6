"""The review from start to end: collect, cluster, propose, replay, rank.

``run_review`` reads the window through a ``LogReader``, embeds what it needs once
(``PromptVectors``), and returns a ``Review`` value that the report renders and ``--apply``
picks a proposal from.  Everything in it is deterministic for a given log and config, so the
proposal numbered N in a report is the one ``--apply N`` writes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from hybrid_gateway.config import GatewayConfig
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.review.cluster import CLUSTER_SIMILARITY, cluster
from hybrid_gateway.review.collect import (
    Collection,
    Flagged,
    check_mode,
    collect,
    reask_candidates,
)
from hybrid_gateway.review.proposals import (
    Proposal,
    apply_edits,
    gate_proposals,
    merge,
    propose,
    threshold_proposal,
)
from hybrid_gateway.review.reader import LogReader
from hybrid_gateway.review.replay import Effect, effect, parse_text, route_all
from hybrid_gateway.review.vectors import PromptVectors

_KIND_ORDER = {"add_keyword": 0, "remove_keyword": 1, "new_rule": 2, "add_gate": 3,
               "remove_gate": 4, "threshold": 5}  # fmt: skip
MAX_PROPOSALS = 20


@dataclass(frozen=True, slots=True)
class Cluster:
    number: int  # 1-based, largest first
    members: tuple[Flagged, ...]

    def reasons(self) -> list[tuple[str, int]]:
        return Counter(f.reason for f in self.members).most_common()

    def categories(self) -> list[tuple[str, int]]:
        """The categories the members declared (``metadata``), most common first."""
        found = Counter(f.request.category for f in self.members if f.request.category)
        return sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))

    def decisions(self) -> list[tuple[str, int]]:
        """What sent them: ``light / how-to-light``, ``light / classifier (score 0.31-0.44)``."""
        groups: dict[str, list[float]] = {}
        for f in self.members:
            groups.setdefault(f"{f.request.lane} / {f.request.rule}", []).append(
                f.request.score if f.request.score is not None else float("nan")
            )
        out = []
        for name, scores in groups.items():
            known = [x for x in scores if x == x]
            if known:
                low, high = min(known), max(known)
                span = f"{low:.2f}" if low == high else f"{low:.2f}-{high:.2f}"
                name = f"{name} (score {span})"
            out.append((name, len(scores)))
        return sorted(out, key=lambda kv: (-kv[1], kv[0]))


@dataclass(frozen=True, slots=True)
class Ranked:
    number: int  # 1-based: the N of --apply N
    proposal: Proposal
    effect: Effect | None  # None: not replayable (prompts stored as hashes)


@dataclass(frozen=True, slots=True)
class Review:
    config_path: Path
    collection: Collection
    clusters: tuple[Cluster, ...]
    ranked: tuple[Ranked, ...]
    baseline: Effect | None  # the config as is, replayed (heavy share and cost "before")
    notes: tuple[str, ...]
    cluster_similarity: float


async def run_review(
    config: GatewayConfig,
    config_path: Path,
    reader: LogReader,
    window: tuple[float, float],
    vectors: PromptVectors,
    *,
    similarity: float = CLUSTER_SIMILARITY,
) -> Review:
    mode = config.server.request_log.prompts
    check_mode(mode)
    routing = config.routing
    requests = reader.requests(*window)
    ratings = reader.thumbs_down(*window)
    text = mode in ("full", "redacted")
    notes: list[str] = []
    if text:
        pairs = reask_candidates(requests)
        await vectors.ensure(p for i, j in pairs for p in (requests[i].prompt, requests[j].prompt)
                             if p is not None)  # fmt: skip
    else:
        notes.append(
            "prompts are stored as hashes (server.request_log.prompts: hash): re-asks are found "
            "by equal text only, flagged requests are grouped by the rule that sent them, not "
            "by meaning, and proposals are neither mined from text nor replayed"
        )
    found = collect(requests, ratings, window, mode, (routing.simple_lane, routing.complex_lane),
                    vectors.known if text else {})  # fmt: skip
    clusters = await _clusters(found, vectors, similarity) if text else _by_rule(found)
    others = [r.prompt for r in found.unflagged() if r.prompt is not None] if text else []
    candidates: list[Proposal] = []
    for c in clusters:
        if text:
            candidates += propose((c.number,), c.members, others, routing)
        else:
            group = [f for f in c.members if f.want is not None]
            moved = threshold_proposal((c.number,), group, routing) if group else None
            candidates += [moved] if moved is not None else []
    if text:
        candidates += _across_clusters(clusters, others, config)
    candidates += gate_proposals([(c.number, f) for c in clusters for f in c.members], routing)
    if routing.gates is not None and not any(r.category for r in requests):
        notes.append(
            f"no request in the window declared a category (metadata.{routing.category_key}): "
            "the category gates applied to none, and none is proposed"
        )
    proposals = merge(candidates)
    if not text:
        ranked = tuple(Ranked(i + 1, p, None) for i, p in enumerate(proposals[:MAX_PROPOSALS]))
        return Review(config_path, found, tuple(clusters), ranked, None, tuple(notes), similarity)
    base_text = config_path.read_text(encoding="utf-8")
    before = await route_all(config, config_path, requests, vectors)
    scored: list[tuple[Proposal, Effect]] = []
    for p in proposals:
        try:
            proposed = parse_text(apply_edits(base_text, p.edits), config_path)
        except (ConfigError, ValueError) as exc:
            notes.append(f"dropped {p.title!r}: the edited config is invalid ({exc})")
            continue
        after = await route_all(proposed, config_path, requests, vectors)
        scored.append((p, effect(requests, found.flagged, before, after)))
    scored.sort(key=lambda pe: (-pe[1].net, -pe[1].flagged_fixed, len(pe[0].edits),
                                _KIND_ORDER[pe[0].kind], pe[0].title))  # fmt: skip
    ranked = tuple(Ranked(i + 1, p, e) for i, (p, e) in enumerate(scored[:MAX_PROPOSALS]))
    baseline = effect(requests, found.flagged, before, before)
    same = sum(1 for r, lane in zip(requests, before.lanes, strict=True)
               if lane is not None and lane == r.lane)  # fmt: skip
    notes.append(
        f"the replay under the config as is gives the logged lane for {same} of "
        f"{baseline.replayed} replayed requests (the rest: the config changed during the "
        "window, or what the log does not keep decided them: earlier turns, attachments, "
        "metadata other than the category, fallbacks)"
    )
    return Review(config_path, found, tuple(clusters), ranked, baseline, tuple(notes), similarity)


def _across_clusters(
    clusters: list[Cluster], others: list[str], config: GatewayConfig
) -> list[Proposal]:
    """Proposals for what one rule (or the classifier) sent the wrong way across several
    clusters: one keyword set may cover a misroute that meaning splits (two languages)."""
    groups: dict[tuple[str | None, str | None], list[tuple[int, Flagged]]] = {}
    for c in clusters:
        for f in c.members:
            if f.want is not None:
                groups.setdefault((f.want, f.request.rule), []).append((c.number, f))
    out: list[Proposal] = []
    for key in sorted(groups, key=str):
        numbers = tuple(sorted({n for n, _ in groups[key]}))
        if len(numbers) > 1:
            out += propose(numbers, [f for _, f in groups[key]], others, config.routing)
    return out


async def _clusters(found: Collection, vectors: PromptVectors, similarity: float) -> list[Cluster]:
    with_text = [f for f in found.flagged if f.request.prompt is not None]
    prompts = [f.request.prompt or "" for f in with_text]
    await vectors.ensure(prompts)
    groups = cluster(vectors.matrix(prompts), similarity)
    return [Cluster(n + 1, tuple(with_text[i] for i in g)) for n, g in enumerate(groups)]


def _by_rule(found: Collection) -> list[Cluster]:
    groups: dict[tuple[str, str], list[Flagged]] = {}
    for f in found.flagged:
        groups.setdefault((f.request.lane or "", f.request.rule or ""), []).append(f)
    ordered = sorted(groups.values(), key=lambda g: (-len(g), g[0].request.ts))
    return [Cluster(n + 1, tuple(g)) for n, g in enumerate(ordered)]
