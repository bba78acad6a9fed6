"""Build the router from the config: rules always; exemplars and classifier when configured.

The classifier model is loaded (and checked against the embedder's namespace) here, at start-up,
so a model trained under another embedder stops the gateway with a config error naming
``routing.classifier.model`` instead of routing on meaningless scores.  The cascade's student
(``routing.classifier.cascade``) is checked the same way against the static embedder, and
against its teacher: a student distilled from another classifier is refused.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from hybrid_gateway.config import GatewayConfig, resolve_path
from hybrid_gateway.config_checks import ROUTER_CASCADE_NEEDS_E5
from hybrid_gateway.embedding.base import AsyncEmbedder
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.routing.cascade import RouterCascade, fingerprint, teacher_of
from hybrid_gateway.routing.classifier import ClassifierModel, RouterModelError, load_model
from hybrid_gateway.routing.exemplars import ExemplarClassifier, load_exemplars
from hybrid_gateway.routing.features import warm_features
from hybrid_gateway.routing.router import GatewayRouter, Learned, LiveModel
from hybrid_gateway.routing.settings import DEFAULT_MODEL, ClassifierConfig
from hybrid_gateway.types import RouteDecision

DEFAULT_MODEL_FILE = "default.npz"
DEFAULT_STUDENT_FILE = "default-static.npz"  # distilled from default.npz (`router distil`)


def default_model_path(name: str = DEFAULT_MODEL_FILE) -> Path:
    """A model shipped in the package (``routing/models/default.npz`` by default)."""
    return Path(str(resources.files("hybrid_gateway.routing.models") / name))


def model_path(
    value: str, config_path: str | Path | None, default: str = DEFAULT_MODEL_FILE
) -> Path:
    return (
        default_model_path(default) if value == DEFAULT_MODEL else resolve_path(config_path, value)
    )


def build_router(
    config: GatewayConfig,
    *,
    config_path: str | Path | None,
    embedder: AsyncEmbedder | None,
    live: LiveModel | None = None,
    static: AsyncEmbedder | None = None,
) -> GatewayRouter:
    """``static``: the runtime's static embedder, for ``routing.classifier.cascade``; None: the
    classifier alone (offline replays route as e5's classifier would)."""
    source = str(config_path or "<config>")
    routing = config.routing
    lane_channels = {name: lane.channel for name, lane in config.lanes.items()}
    learned = None
    if routing.learned:
        if embedder is None:
            raise ConfigError(source, "routing", "an embedder for the classifier/exemplars")
        model: ClassifierModel | None = None
        threshold = 0.5
        if routing.classifier is not None:
            path = model_path(routing.classifier.model, config_path)
            try:
                model = load_model(path, embedder.namespace)
            except RouterModelError as exc:
                raise ConfigError(source, "routing.classifier.model", str(exc)) from None
            threshold = routing.classifier.threshold
            warm_features()  # the character tables, built now rather than on a request
        cascade = None
        if model is not None and static is not None and routing.classifier is not None:
            cascade = _cascade(routing.classifier, model, static, source, config_path)
        exemplars = None
        if routing.exemplars is not None:
            sets = load_exemplars(resolve_path(config_path, routing.exemplars.path))
            exemplars = ExemplarClassifier(
                sets, embedder, margin=routing.exemplars.margin, k=routing.exemplars.k
            )
        learned = Learned(
            simple=RouteDecision(routing.simple_lane, lane_channels[routing.simple_lane], ""),
            complex=RouteDecision(routing.complex_lane, lane_channels[routing.complex_lane], ""),
            exemplars=exemplars,
            model=model,
            threshold=threshold,
            live=live,  # learning.router_update: the versioned model, when one is live
            cascade=cascade,
        )
    return GatewayRouter(
        routing,
        lane_channels=lane_channels,
        model_lanes={m.id: m.lane for m in config.models},
        learned=learned,
    )


def _cascade(
    classifier: ClassifierConfig,
    teacher: ClassifierModel,
    static: AsyncEmbedder,
    source: str,
    config_path: str | Path | None,
) -> RouterCascade | None:
    settings = classifier.cascade
    if settings is None:
        return None
    field = "routing.classifier.cascade.model"
    if static.namespace == teacher.namespace:
        raise ConfigError(source, *ROUTER_CASCADE_NEEDS_E5)
    path = model_path(settings.model, config_path, DEFAULT_STUDENT_FILE)
    try:
        student = load_model(path, static.namespace)
    except RouterModelError as exc:
        raise ConfigError(source, field, str(exc)) from None
    expected = fingerprint(teacher)
    if teacher_of(student) != expected:
        raise ConfigError(
            source, field, f"{path}: a student distilled from routing.classifier.model "
            f"({classifier.model}); this one is not (run `hybrid-gateway router distil`)",
        )  # fmt: skip
    return RouterCascade(student, static, settings.margin)
