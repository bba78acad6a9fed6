"""The ``cache.semantic`` config section.

The decision keys (``threshold``, ``guards``, ``target_precision``, ``calibrated_on``, and
``verifier`` / ``verifier_threshold``) are what ``hybrid-gateway cache calibrate`` writes; a
hand-set threshold works too, but only a calibrated one comes with a false-hit bound.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from hybrid_gateway.configbase import Fraction, PositiveFloat, PositiveInt, Strict

GuardName = Literal["numbers", "dates", "negation", "entities", "antonyms", "order"]


class RerankerConfig(Strict):
    # cross-encoder: a sentence-transformers CrossEncoder folder (extra [st]); http: a /rerank URL;
    # e5-cross-encoder: a model file from `cache train-reranker` (numpy at run time), its
    # min_score and the cosine floor (threshold) written by `cache calibrate --reranker`
    kind: Literal["cross-encoder", "http", "e5-cross-encoder"]
    path: str | None = None
    url: str | None = Field(default=None, pattern=r"^https?://")
    model: str | None = None
    timeout_s: PositiveFloat = 2.0
    # A candidate that passed the threshold and the guards is a hit only when the reranker's
    # score + cosine_weight * (the candidate's cosine) is at or above min_score.  The cosine
    # orders the many candidates a fine-tuned model scores alike at its ceiling;
    # `cache calibrate --reranker` writes both (cosine_weight 1 by default).
    min_score: float = 0.5
    cosine_weight: Annotated[float, Field(ge=0)] = 0.0

    @model_validator(mode="after")
    def _target(self) -> RerankerConfig:
        if self.kind == "cross-encoder" and not self.path:
            raise ValueError("a cross-encoder reranker needs path (a local model folder)")
        if self.kind == "e5-cross-encoder" and not self.path:
            raise ValueError("an e5-cross-encoder reranker needs path (a `cache train-reranker` "
                             "model file)")  # fmt: skip
        if self.kind == "http" and not self.url:
            raise ValueError("an http reranker needs url")
        return self


class CascadeConfig(Strict):
    """Static prefilter, e5 decides (``cascade.py``): e5 runs only for a plausible hit."""

    # The static cosine (embedding.static) under which the nearest stored question is a
    # certain miss.  Chosen on labelled pairs so that ~99 % of e5's true hits pass it
    # (benchmarks/experiments/static_embedder_cascade.py; LCQMC: see
    # docs/smart-path-performance.md).  `threshold` stays e5's and decides the rest.
    static_bound: Annotated[float, Field(ge=-1, le=1)]
    # e5's confirmation of a plausible hit waits at most this long, then the request skips
    # the cache (bypass, embedder_slow); null: it waits (the embedder's queue still bounds it).
    confirm_timeout_ms: PositiveFloat | None = 200.0


class SemanticCacheConfig(Strict):
    enabled: bool = False
    # SQLite file the entries are written through to (relative: against the config file);
    # null keeps the cache in memory only.
    path: str | None = "var/semantic-cache.sqlite3"
    ttl_s: PositiveFloat = 86_400.0
    max_entries: PositiveInt = 100_000
    # Answers + questions + vectors (384 float32 = 1.5 KiB each with the bundled model).
    max_bytes: PositiveInt = 256 * 1024 * 1024
    # The hit decision: cosine >= threshold, then every listed guard must pass.  The default
    # is the bundled model's threshold for precision >= 0.95 on LCQMC paraphrases (calibrated
    # on half the dev set: 0.9948); recalibrate on your own pairs with `cache calibrate`.
    threshold: Annotated[float, Field(ge=-1, le=1)] = 0.995
    guards: tuple[GuardName, ...] = ("numbers", "dates", "negation", "entities", "antonyms")
    # Provenance of threshold/guards, written by `cache calibrate` (informational).
    target_precision: Fraction | None = None
    calibrated_on: str | None = None
    # Optional learned pair verifier (`cache train-verifier`): a model file (relative: against
    # the config file) and the threshold on its score, both written by
    # `cache calibrate --verifier`.  The model must have been trained under this embedder.
    verifier: str | None = None
    verifier_threshold: Fraction | None = None
    reranker: RerankerConfig | None = None
    # Noise stripped before embedding and from the context fingerprint, on top of the
    # built-in ids/UUIDs/hex tokens: regular expressions, and user names (whole words).
    noise_patterns: tuple[str, ...] = ()
    user_names: tuple[str, ...] = ()
    # Clock readings (timestamps with a time of day, epoch seconds): stripped from system and
    # developer messages, where clients inject "now" ("system"), from every message ("all"),
    # or kept ("none").  In a user's own words they are usually the question.
    strip_timestamps: Literal["none", "system", "all"] = "system"
    # Questions matching any of these (case-insensitive) are never looked up nor stored, in
    # either cache (also while the semantic cache is off): the operator's way to mark answers
    # uncacheable (account balances, anything personal).
    uncacheable_patterns: tuple[str, ...] = ()
    # Write-behind: a miss's answer is written to the cache (index + store) after the response
    # has gone, in order on the cache's worker thread (a later lookup still sees it); at most
    # write_behind_max_pending writes wait, more are dropped.  false: the request waits for it.
    write_behind: bool = False
    write_behind_max_pending: PositiveInt = 256
    # Off (null): e5 embeds every question looked up or stored.  On: entries are indexed by
    # the static embedder, e5 confirms only candidates within static_bound (a new namespace:
    # entries stored without the cascade are not read with it, and the other way round).
    cascade: CascadeConfig | None = None

    @model_validator(mode="after")
    def _verifier_calibrated(self) -> SemanticCacheConfig:
        if self.verifier is not None and self.verifier_threshold is None:
            raise ValueError("verifier needs verifier_threshold (`cache calibrate --verifier`)")
        if self.cascade is not None and self.verifier is not None:
            raise ValueError("cascade and verifier: the verifier reads e5 vectors of both "
                             "questions, the cascade's index holds static ones")  # fmt: skip
        return self

    @field_validator("noise_patterns", "uncacheable_patterns")
    @classmethod
    def _compiles(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"a regular expression, got {pattern!r} ({exc})") from None
        return patterns
