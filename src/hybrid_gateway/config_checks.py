"""Checks across config sections that the start-up builders rely on, run when a config is parsed.

Each one used to be found only while ``serve`` built its runtime (``learning/build.py``,
``learning/build_update.py``, ``cache/semantic/build.py``), so ``config check`` passed a file
that ``serve`` then refused.  They depend on the config alone (no file, environment variable
or running service), and ``parse_config`` runs them after the typed tree is built: ``config
check``, ``serve``, a hot reload and ``bench run`` report the same ``ConfigError``.  The
builders keep their own guard with the same words (these pairs), for runtimes built from a
config that did not go through ``parse_config``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybrid_gateway.errors import ConfigError

if TYPE_CHECKING:
    from hybrid_gateway.config import GatewayConfig

__all__ = [
    "AUDIT_NEEDS_LOG", "CASCADE_NEEDS_E5", "ROUTER_CASCADE_NEEDS_E5", "THRESHOLD_NEEDS_SEMANTIC",
    "UPDATE_NEEDS_CLASSIFIER", "UPDATE_NEEDS_LOG", "UPDATE_NEEDS_PROMPTS", "cross_checks",
]  # fmt: skip

# (field, what was expected there)
CASCADE_NEEDS_E5 = (
    "cache.semantic.cascade",
    "null with embedding.backend static (nothing left to confirm with: the cascade confirms "
    "with e5)",
)
ROUTER_CASCADE_NEEDS_E5 = (
    "routing.classifier.cascade",
    "null with embedding.backend static (the classifier already reads static vectors)",
)
AUDIT_NEEDS_LOG = (
    "learning.audit.enabled",
    "false, or server.request_log.enabled: true (verdicts are stored with the log)",
)
THRESHOLD_NEEDS_SEMANTIC = (
    "learning.cache_threshold.enabled",
    "false, or cache.semantic.enabled: true (it moves the semantic cache's threshold)",
)
_UPDATE = "learning.router_update.enabled"
UPDATE_NEEDS_CLASSIFIER = (_UPDATE, "false, or routing.classifier set (it updates it)")
UPDATE_NEEDS_LOG = (
    _UPDATE,
    "false, or server.request_log.enabled: true (versions and audits live in the records store)",
)
UPDATE_NEEDS_PROMPTS = (
    _UPDATE,
    "false, or server.request_log.prompts: full or redacted (it learns from the audited "
    "questions' text)",
)


def cross_checks(config: GatewayConfig, source: str) -> None:
    """Raise the ``ConfigError`` that ``serve`` would raise building its runtime, in its order."""
    for failed, (field, expected) in _checks(config):
        if failed:
            raise ConfigError(source, field, expected)


def _checks(config: GatewayConfig) -> list[tuple[bool, tuple[str, str]]]:
    semantic = config.cache.semantic
    log = config.server.request_log
    learning = config.learning
    update = learning.router_update
    classifier = config.routing.classifier
    return [
        (semantic.enabled and semantic.cascade is not None
         and config.embedding.backend == "static", CASCADE_NEEDS_E5),
        (classifier is not None and classifier.cascade is not None
         and config.embedding.backend == "static", ROUTER_CASCADE_NEEDS_E5),
        (learning.audit.enabled and not log.enabled, AUDIT_NEEDS_LOG),
        (learning.audit.enabled and learning.cache_threshold.enabled and not semantic.enabled,
         THRESHOLD_NEEDS_SEMANTIC),
        (update.enabled and config.routing.classifier is None, UPDATE_NEEDS_CLASSIFIER),
        (update.enabled and not log.enabled, UPDATE_NEEDS_LOG),
        (update.enabled and update.train and log.prompts not in ("full", "redacted"),
         UPDATE_NEEDS_PROMPTS),
    ]  # fmt: skip
