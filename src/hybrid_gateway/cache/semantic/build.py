"""Build the semantic cache stage from the config (at start-up, in ``api/runtime.py``)."""

from __future__ import annotations

from pathlib import Path

from hybrid_gateway.cache.semantic.cache import CacheBounds, SemanticCache
from hybrid_gateway.cache.semantic.decision import DecisionRule, VerifierCheck
from hybrid_gateway.cache.semantic.hygiene import DEFAULT_NOISE, NoiseStripper
from hybrid_gateway.cache.semantic.rerank import CrossEncoderReranker, HttpReranker, Reranker
from hybrid_gateway.cache.semantic.settings import RerankerConfig, SemanticCacheConfig
from hybrid_gateway.cache.semantic.stage import RerankStep, SemanticStage
from hybrid_gateway.cache.semantic.store import SqliteEntryStore
from hybrid_gateway.cache.semantic.verifier import VerifierError, load_verifier
from hybrid_gateway.config import GatewayConfig, resolve_path
from hybrid_gateway.embedding.base import AsyncEmbedder
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.resilience.clock import Clock


def build_reranker(cfg: RerankerConfig, config_path: str | Path | None) -> Reranker:
    if cfg.kind == "cross-encoder":
        assert cfg.path is not None  # checked by the config
        return CrossEncoderReranker(resolve_path(config_path, cfg.path))
    assert cfg.url is not None
    return HttpReranker(cfg.url, timeout_s=cfg.timeout_s, model=cfg.model)


def build_verifier(
    cfg: SemanticCacheConfig, config_path: str | Path | None, namespace: str
) -> VerifierCheck | None:
    """The configured verifier, refused (``ConfigError``) if trained under another embedder."""
    if cfg.verifier is None or cfg.verifier_threshold is None:
        return None
    try:
        model = load_verifier(resolve_path(config_path, cfg.verifier), namespace)
    except VerifierError as exc:
        raise ConfigError(str(config_path or "<config>"), "cache.semantic.verifier",
                          f"a verifier model file for {namespace} ({exc})") from None  # fmt: skip
    return VerifierCheck(model, cfg.verifier_threshold)


def build_semantic_stage(
    config: GatewayConfig,
    *,
    config_path: str | Path | None,
    clock: Clock,
    embedder: AsyncEmbedder,
) -> SemanticStage:
    cfg = config.cache.semantic
    store = SqliteEntryStore(resolve_path(config_path, cfg.path)) if cfg.path else None
    cache = SemanticCache(
        bounds=CacheBounds(ttl_s=cfg.ttl_s, max_entries=cfg.max_entries, max_bytes=cfg.max_bytes),
        rule=DecisionRule(
            threshold=cfg.threshold,
            guards=tuple(cfg.guards),
            verifier=build_verifier(cfg, config_path, embedder.namespace),
        ),
        clock=clock,
        store=store,
    )
    cache.load_at_start(embedder.namespace)
    rerank = None
    if cfg.reranker is not None:
        rerank = RerankStep(build_reranker(cfg.reranker, config_path), cfg.reranker.min_score)
    return SemanticStage(
        cache,
        embedder,
        stripper=NoiseStripper((*DEFAULT_NOISE, *cfg.noise_patterns), cfg.user_names),
        shared_scopes={
            name: tenant.cache_scope
            for name, tenant in config.tenants.items()
            if tenant.cache_scope is not None
        },
        uncacheable=cfg.uncacheable_patterns,
        rerank=rerank,
    )
