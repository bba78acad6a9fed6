"""The gateway's router: forced model -> category gates -> rules -> exemplars -> classifier.

``route`` is async because the learned stages need the request's embedding, which the pipeline
computes lazily (at most once per request, shared with the semantic cache) and awaits off the
event loop.  A request the rules settle never pays for an embedding.  The order and what each
step names in ``x-gateway-route`` are described in ``routing/settings.py``.

When a learned stage cannot run (no embedding attached to the request, or ``embed=False``,
used to estimate what a cache hit saved, and the vector was not computed anyway) the request
goes to the default lane, named ``default``.  When it fails (the embedding service or the
exemplar store is down) the request goes there too, named ``default:learned_unavailable``:
a dependency outage costs routing quality, never the request.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

from hybrid_gateway.embedding.batching import EmbedderSaturated
from hybrid_gateway.embedding.lazy import (
    LazyEmbedding,
    attach_static,
    client_check,
    request_embedding,
    static_embedding,
)
from hybrid_gateway.routing.cascade import STATIC_SUFFIX, RouterCascade
from hybrid_gateway.routing.classifier import ClassifierModel
from hybrid_gateway.routing.exemplars import ExemplarClassifier
from hybrid_gateway.routing.rules import RequestFeatures, RuleBook, extract_features
from hybrid_gateway.routing.settings import GateConfig, RoutingConfig
from hybrid_gateway.types import ChatRequest, RequestRecord, RouteDecision

log = logging.getLogger(__name__)

CLASSIFIER_RULE = "classifier"


@dataclass(frozen=True, slots=True)
class VersionedModel:
    """A classifier model from the records store's versions (learning/router_update.py)."""

    model: ClassifierModel
    version: int
    # its static student, for the cascade (trained with it, here or by the replica that stored
    # it); None: e5's classifier decides all
    student: ClassifierModel | None = None


class LiveModel:
    """Where the automatic update puts the model the classifier uses instead of its file's: one
    immutable reference, replaced whole (a request reads it once); None: the file's model."""

    def __init__(self) -> None:
        self.current: VersionedModel | None = None


@dataclass(frozen=True, slots=True)
class Learned:
    """The learned stages and the two lanes they choose between."""

    simple: RouteDecision
    complex: RouteDecision
    exemplars: ExemplarClassifier | None = None
    model: ClassifierModel | None = None
    threshold: float = 0.5
    # learning.router_update: a versioned model in place of ``model`` (rule classifier@vN)
    live: LiveModel | None = None
    # routing.classifier.cascade: the static student scores first (routing/cascade.py)
    cascade: RouterCascade | None = None

    def __post_init__(self) -> None:
        if self.exemplars is None and self.model is None:
            raise ValueError("a learned stage needs exemplars or a classifier model")


class GatewayRouter:
    def __init__(
        self,
        config: RoutingConfig,
        *,
        lane_channels: Mapping[str, str],
        model_lanes: Mapping[str, str | None],
        learned: Learned | None = None,
    ) -> None:
        def decision(lane: str, rule: str) -> RouteDecision:
            return RouteDecision(lane=lane, channel=lane_channels[lane], rule=rule)

        self._forced = {
            model: decision(lane, f"model:{model}")
            for model, lane in model_lanes.items()
            if lane is not None
        }
        self._rules = RuleBook(config.rules, lane_channels)
        self._default = decision(config.default_lane, "default")
        gates: GateConfig | None = config.gates
        self._gate_key = config.category_key
        self._gates = {
            category: decision(config.complex_lane, f"gate:{category}")
            for category in (gates.heavy_categories if gates else ())
        }
        self._learned = learned

    @property
    def learned(self) -> Learned | None:
        """The learned stages as built (the classifier's file model, its cascade's student)."""
        return self._learned

    async def route(
        self, request: ChatRequest, record: RequestRecord, *, embed: bool = True
    ) -> RouteDecision:
        forced = self._forced.get(request.model)
        if forced is not None:
            return forced
        metadata = request.body.get("metadata")
        features = extract_features(
            request.messages, metadata if isinstance(metadata, dict) else None
        )
        if self._gates:
            gated = self._gate(features)
            if gated is not None:
                return gated
        outcome = self._rules.match(features, record.tenant)
        if isinstance(outcome, RouteDecision):
            return outcome
        if self._learned is not None:
            try:
                learned = await self._decide(self._learned, features, record, embed)
            except Exception as exc:  # the embedder or exemplar store is down: route anyway
                log.warning("learned routing unavailable, default lane: %r", exc)
                record.extra["route_error"] = type(exc).__name__
                return replace(self._default, rule=f"{self._default.rule}:learned_unavailable")
            if learned is not None:
                return learned
        return self._default

    def _gate(self, features: RequestFeatures) -> RouteDecision | None:
        category = (features.metadata or {}).get(self._gate_key)
        return self._gates.get(category) if isinstance(category, str) else None

    async def _decide(
        self, learned: Learned, features: RequestFeatures, record: RequestRecord, embed: bool
    ) -> RouteDecision | None:
        lazy = request_embedding(record)
        if lazy is None:
            return None
        if learned.exemplars is not None and (embed or lazy.computed):
            verdict = await learned.exemplars.classify(record.tenant, await lazy.vector())
            if verdict is not None:
                base = learned.complex if verdict.complex else learned.simple
                return RouteDecision(
                    base.lane, base.channel, f"exemplars:{verdict.set_name}", verdict.margin
                )
        model, rule = learned.model, CLASSIFIER_RULE
        versioned = learned.live.current if learned.live is not None else None
        if versioned is not None and model is not None:
            model, rule = versioned.model, f"{CLASSIFIER_RULE}@v{versioned.version}"
        if model is None:
            return None
        # the cascade: the file model's student, or the live version's when it has one
        if learned.cascade is not None:
            student = learned.cascade.student if versioned is None else versioned.student
            if student is not None:
                static = await _student(learned, student, rule, features, record, lazy, embed)
                if static is not None:
                    return static
        if not (embed or lazy.computed):
            return None
        p = model.p_complex(await lazy.vector(), features.question)
        base = learned.complex if p >= learned.threshold else learned.simple
        return RouteDecision(base.lane, base.channel, rule, p, learned.threshold)


async def _student(
    learned: Learned,
    student: ClassifierModel,
    rule: str,
    features: RequestFeatures,
    record: RequestRecord,
    lazy: LazyEmbedding,
    embed: bool,
) -> RouteDecision | None:
    """The cascade's static student: its decision when it is clear of the threshold by the
    margin; None: e5's classifier decides (the margin not cleared, or the static vector not
    available: its embedder busy or failing costs an e5 call, never the request)."""
    cascade = learned.cascade
    assert cascade is not None
    static = static_embedding(record)
    if static is None:  # no semantic cascade attached one: the same text as e5's vector
        static = LazyEmbedding(cascade.embedder, lazy.text, client_check(record))
        attach_static(record, static)
    if not (embed or static.computed):
        return None
    try:
        vector = await static.vector()
    except Exception as exc:  # any failure: e5's classifier decides
        # a full queue or a client that left is overload, counted where it happens; an error
        # is news
        level = logging.INFO if isinstance(exc, EmbedderSaturated) else logging.WARNING
        log.log(level, "static vector unavailable, e5's classifier decides: %r", exc)
        return None
    p = student.p_complex(vector, features.question)
    if not cascade.decides(p, learned.threshold):
        return None
    base = learned.complex if p >= learned.threshold else learned.simple
    return RouteDecision(base.lane, base.channel, f"{rule}{STATIC_SUFFIX}", p, learned.threshold)
