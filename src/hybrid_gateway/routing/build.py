"""Build the router from the config: rules always; exemplars and classifier when configured.

The classifier model is loaded (and checked against the embedder's namespace) here, at start-up,
so a model trained under another embedder stops the gateway with a config error naming
``routing.classifier.model`` instead of routing on meaningless scores.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from hybrid_gateway.config import GatewayConfig, resolve_path
from hybrid_gateway.embedding.base import AsyncEmbedder
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.routing.classifier import ClassifierModel, RouterModelError, load_model
from hybrid_gateway.routing.exemplars import ExemplarClassifier, load_exemplars
from hybrid_gateway.routing.router import GatewayRouter, Learned, LiveModel
from hybrid_gateway.routing.settings import DEFAULT_MODEL
from hybrid_gateway.types import RouteDecision

DEFAULT_MODEL_FILE = "default.npz"


def default_model_path() -> Path:
    """The model shipped in the package (``routing/models/default.npz``)."""
    return Path(str(resources.files("hybrid_gateway.routing.models") / DEFAULT_MODEL_FILE))


def model_path(value: str, config_path: str | Path | None) -> Path:
    return default_model_path() if value == DEFAULT_MODEL else resolve_path(config_path, value)


def build_router(
    config: GatewayConfig,
    *,
    config_path: str | Path | None,
    embedder: AsyncEmbedder | None,
    live: LiveModel | None = None,
) -> GatewayRouter:
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
        )
    return GatewayRouter(
        routing,
        lane_channels=lane_channels,
        model_lanes={m.id: m.lane for m in config.models},
        learned=learned,
    )
