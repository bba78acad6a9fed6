"""Build the semantic cache stage from the config (at start-up, in ``api/runtime.py``)."""

from __future__ import annotations

from pathlib import Path

from hybrid_gateway.cache.semantic.backend import SemanticBackend
from hybrid_gateway.cache.semantic.cache import CacheBounds, SemanticCache
from hybrid_gateway.cache.semantic.cascade import CascadeStep
from hybrid_gateway.cache.semantic.cross_encoder import CrossEncoderError, E5CrossEncoderReranker
from hybrid_gateway.cache.semantic.decision import DecisionRule, VerifierCheck
from hybrid_gateway.cache.semantic.hygiene import DEFAULT_NOISE, NoiseStripper
from hybrid_gateway.cache.semantic.index import STATIC_EXACT_UP_TO, NumpyIndex
from hybrid_gateway.cache.semantic.rerank import CrossEncoderReranker, HttpReranker, Reranker
from hybrid_gateway.cache.semantic.settings import RerankerConfig, SemanticCacheConfig
from hybrid_gateway.cache.semantic.stage import RerankStep, SemanticStage
from hybrid_gateway.cache.semantic.store import SqliteEntryStore
from hybrid_gateway.cache.semantic.verifier import VerifierError, load_verifier
from hybrid_gateway.config import GatewayConfig, resolve_path
from hybrid_gateway.config_checks import CASCADE_NEEDS_E5
from hybrid_gateway.embedding.base import AsyncEmbedder
from hybrid_gateway.embedding.factory import build_static_embedder
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.stores.health import StoreHealth


def build_reranker(cfg: RerankerConfig, config_path: str | Path | None) -> Reranker:
    if cfg.kind == "e5-cross-encoder":
        assert cfg.path is not None  # checked by the config
        try:
            return E5CrossEncoderReranker(resolve_path(config_path, cfg.path))
        except CrossEncoderError as exc:
            raise ConfigError(str(config_path or "<config>"), "cache.semantic.reranker.path",
                              f"a `cache train-reranker` model file ({exc})") from None  # fmt: skip
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


def build_pg_cache(
    config: GatewayConfig,
    bounds: CacheBounds,
    rule: DecisionRule,
    clock: Clock,
    health: StoreHealth,
    source: str = "<config>",
) -> SemanticBackend:
    """``stores.records: postgres``: the entries in the shared pgvector table; ``health`` is
    PostgreSQL's, shared with the request log and feedback of this process."""
    try:
        from hybrid_gateway.cache.semantic.store_pg import PgSemanticCache
    except ImportError as exc:
        expected = f"sqlite, or install the postgres extra for postgres ({exc})"
        raise ConfigError(source, "stores.records", expected) from exc
    stores = config.stores
    return PgSemanticCache(stores.postgres_url, bounds=bounds, rule=rule, clock=clock,
                           health=health, timeout_s=stores.postgres_timeout_ms / 1000)  # fmt: skip


def build_rule(
    cfg: SemanticCacheConfig, config_path: str | Path | None, namespace: str
) -> DecisionRule:
    """The hit decision of ``cfg`` (at start-up, and again on a hot reload)."""
    return DecisionRule(
        threshold=cfg.threshold,
        guards=tuple(cfg.guards),
        verifier=build_verifier(cfg, config_path, namespace),
    )


def shared_scopes(config: GatewayConfig) -> dict[str, str]:
    """Tenant -> the cache scope it shares, for the tenants that declare one."""
    return {
        name: tenant.cache_scope
        for name, tenant in config.tenants.items()
        if tenant.cache_scope is not None
    }


def build_semantic_stage(
    config: GatewayConfig,
    *,
    config_path: str | Path | None,
    clock: Clock,
    embedder: AsyncEmbedder,
    pg_health: StoreHealth | None = None,
    static: AsyncEmbedder | None = None,
) -> SemanticStage:
    """``pg_health``: PostgreSQL's health, required with ``stores.records: postgres``;
    ``static``: the runtime's static embedder, shared with the router's cascade (None: the
    cache's cascade builds its own)."""
    cfg = config.cache.semantic
    bounds = CacheBounds(ttl_s=cfg.ttl_s, max_entries=cfg.max_entries, max_bytes=cfg.max_bytes)
    rule = build_rule(cfg, config_path, embedder.namespace)
    cascade = build_cascade(config, config_path, static)
    index = embedder if cascade is None else cascade.static  # whose vectors the entries hold
    cache: SemanticBackend
    if config.stores.records == "postgres":
        assert pg_health is not None, "records: postgres is built with PostgreSQL's health"
        source = str(config_path or "<config>")
        cache = build_pg_cache(config, bounds, rule, clock, pg_health, source)
    else:
        store = SqliteEntryStore(resolve_path(config_path, cfg.path)) if cfg.path else None
        # the cascade's static index: sign-prefiltered from STATIC_EXACT_UP_TO entries (an
        # exact product over every entry was most of a short request's CPU; index.py)
        search = NumpyIndex(exact_up_to=STATIC_EXACT_UP_TO) if cascade is not None else None
        local = SemanticCache(bounds=bounds, rule=rule, clock=clock, store=store, index=search)
        local.load_at_start(index.namespace)
        cache = local
    rerank = None
    if cfg.reranker is not None:
        rerank = RerankStep(build_reranker(cfg.reranker, config_path), cfg.reranker.min_score,
                            cfg.reranker.cosine_weight)  # fmt: skip
    return SemanticStage(
        cache,
        embedder,
        stripper=NoiseStripper(
            (*DEFAULT_NOISE, *cfg.noise_patterns), cfg.user_names, cfg.strip_timestamps
        ),
        shared_scopes=shared_scopes(config),
        rerank=rerank,
        write_behind=cfg.write_behind,
        write_behind_max_pending=cfg.write_behind_max_pending,
        cascade=cascade,
    )


def build_cascade(
    config: GatewayConfig, config_path: str | Path | None, static: AsyncEmbedder | None = None
) -> CascadeStep | None:
    """The static prefilter of ``cache.semantic.cascade`` (None: off); ``static``: a shared
    static embedder (the caller closes it), None: one of its own."""
    cfg = config.cache.semantic
    if cfg.cascade is None:
        return None
    if config.embedding.backend == "static":
        raise ConfigError(str(config_path or "<config>"), *CASCADE_NEEDS_E5)
    timeout = cfg.cascade.confirm_timeout_ms
    return CascadeStep(static or build_static_embedder(config.embedding),
                       cfg.cascade.static_bound, None if timeout is None else timeout / 1000,
                       owned=static is None)  # fmt: skip
