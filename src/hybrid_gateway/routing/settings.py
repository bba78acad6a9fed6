"""The ``routing`` config section: rules, then the learned stages (exemplars, classifier), gates.

A request is decided by the first of these that decides:

1. ``model: <lane's model>``: the client asked for a lane directly (``rule=model:<id>``);
2. ``gates``: its declared category (``metadata.category``) is one where the light model was
   measured below the quality floor (``hybrid-gateway router calibrate`` writes these);
3. ``rules``, in order: the first whose conditions all hold picks its ``lane``, or with
   ``action: classifier`` passes the request on to step 4 without trying later rules;
4. the learned stages, when configured: the tenant's ``exemplars`` (nearest class, if the
   margin is clear), then the ``classifier`` (P(complex) >= threshold -> complex lane);
5. ``default_lane``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from hybrid_gateway.configbase import Fraction, PositiveInt, Strict

# The model file shipped in the package (routing/models/); any other value is a path.
DEFAULT_MODEL = "default"


class RuleCondition(Strict):
    """All given conditions must hold (AND); omitted ones are not checked."""

    keywords_any: tuple[str, ...] = ()
    max_chars: PositiveInt | None = None
    min_chars: PositiveInt | None = None
    has_code_block: bool | None = None
    max_user_turns: PositiveInt | None = None
    min_user_turns: PositiveInt | None = None
    # Numbers in the last user message (runs of digits, "3.5" is one): a short question that
    # carries two or more is a calculation more often than a lookup.
    min_numbers: PositiveInt | None = None
    # A content part that is not text (image_url, input_image, file, input_file, input_audio).
    has_attachment: bool | None = None
    # metadata.document_type, or the extension of an attached file's filename (lower-case).
    document_types: tuple[str, ...] = ()
    # The request's tenant (from its API key): per-tenant forced tiers.
    tenants: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _not_empty(self) -> RuleCondition:
        if not any(value not in (None, ()) for value in self.model_dump().values()):
            raise ValueError("a rule needs at least one condition")
        return self


class RuleConfig(Strict):
    name: Annotated[str, Field(min_length=1)]
    when: RuleCondition
    # Either a lane, or `action: classifier` (hand the request to the learned stages).
    lane: str | None = None
    action: Literal["classifier"] | None = None

    @model_validator(mode="after")
    def _one_action(self) -> RuleConfig:
        if (self.lane is None) == (self.action is None):
            raise ValueError("a rule needs exactly one of lane or action: classifier")
        return self


class ClassifierCascadeConfig(Strict):
    """The classifier's static-then-e5 cascade (routing/cascade.py): a copy of the classifier
    over the static embedder's vector decides alone when its logit is at least ``margin``
    from the threshold's; e5's classifier decides the rest."""

    # "default": the static model shipped beside the default classifier
    # (routing/models/default-static.npz); otherwise a file written by `router distil` from
    # routing.classifier.model (the gateway refuses one distilled from another model).
    model: str = DEFAULT_MODEL
    # In logits: 0 = the static model always decides (e5 never runs for the classifier);
    # larger = more questions confirmed by e5.  `router distil` prints the share and the
    # agreement with e5 for several margins.
    margin: Annotated[float, Field(ge=0, le=20)] = 1.0


class ClassifierConfig(Strict):
    # "default": the model shipped in the package; otherwise a model file path (relative:
    # against the config file), written by `hybrid-gateway router train`.
    model: str = DEFAULT_MODEL
    # P(complex) at or above this goes to the complex lane.  Lower = more heavy calls, higher
    # quality, higher cost; `hybrid-gateway router calibrate` picks it under a quality floor.
    threshold: Fraction = 0.5
    # null: e5's classifier scores every question the rules pass on.
    cascade: ClassifierCascadeConfig | None = None


class ExemplarConfig(Strict):
    # A YAML/JSON file: {tenant: {simple: [questions], complex: [questions]}}; the tenant
    # "default" serves tenants without their own set.  Relative: against the config file.
    path: str
    # Decide only when the nearer class is closer by at least this much cosine similarity;
    # otherwise pass on to the classifier (or the default lane).
    margin: Annotated[float, Field(ge=0, le=2)] = 0.02
    # Similarity to a class = mean of its k most similar exemplars.
    k: PositiveInt = 3


CATEGORY_KEY = "category"  # the default metadata key of a request's category


class GateConfig(Strict):
    # Categories whose light-model quality was measured below the floor: always the complex lane.
    heavy_categories: tuple[str, ...] = ()
    # Where a request declares its category: the key in the request's `metadata`.
    metadata_key: str = CATEGORY_KEY


class RoutingConfig(Strict):
    default_lane: str = "heavy"
    rules: tuple[RuleConfig, ...] = ()
    # The lanes the learned stages and gates choose between.
    simple_lane: str = "light"
    complex_lane: str = "heavy"
    exemplars: ExemplarConfig | None = None
    classifier: ClassifierConfig | None = None
    gates: GateConfig | None = None

    @property
    def category_key(self) -> str:
        """The ``metadata`` key the gates read a request's category from (the router, and the
        request log's ``category`` column, which the misroute replay feeds back)."""
        return self.gates.metadata_key if self.gates is not None else CATEGORY_KEY

    @property
    def learned(self) -> bool:
        return self.exemplars is not None or self.classifier is not None

    @model_validator(mode="after")
    def _pass_on_needs_a_stage(self) -> RoutingConfig:
        for rule in self.rules:
            if rule.action == "classifier" and not self.learned:
                raise ValueError(
                    f"rule {rule.name!r} passes on to the classifier: configure "
                    "routing.classifier or routing.exemplars"
                )
        return self
