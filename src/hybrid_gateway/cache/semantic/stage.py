"""The semantic cache as a pipeline stage: look up after an exact miss, store at settle time.

    prepare   split the request into question + bucket (``hygiene.py``), attach the request's
              lazily computed embedding to its record (shared with the router), pick the
              namespace: (the tenant, or the cache_scope it shares; embedder model@version)
    lookup    embed (once), nearest neighbour in the partition, the decision rule, then the
              optional reranker; a hit writes similarity, entry id and the checks that passed
              onto the record (a miss that only the threshold refused: the entry's id as
              ``cache_near``, for the near-miss audits).  Any failure here (embedder down,
              reranker timeout) is a miss: the request goes upstream, it never fails because
              of the cache; with the
              shared store down (``StoreUnavailable``) the checks say ``store_down`` and the
              answer is not stored either (``stores.semantic_on_outage: bypass``)
              With the embedder saturated (``EmbedderSaturated``: its queue is full) the
              request does not wait: the cache is bypassed (``x-gateway-cache: bypass``,
              checks ``embedder_busy``) and nothing is stored here for it (the exact cache
              still keeps its answer; with the cascade, it is stored under its static vector)
    store     only what the pipeline judged complete (no error, no partial stream, no tool
              call), only for requests that had a question; the pipeline keeps the questions
              the operator marked uncacheable out of both caches (``gateway.py``).  With
              ``write_behind`` the write (index + SQLite) is queued and the request goes on:
              it runs on the cache's one worker thread, in order, so a later lookup still
              sees it; at most ``write_behind_max_pending`` wait (more are dropped, counted),
              and ``aclose`` finishes them

Nothing here knows about HTTP; the record carries everything the API layer shows.

With ``cache.semantic.cascade`` (``cascade.py``) the entries are indexed by the static
embedder's vectors, a candidate under the static bound is a certain miss without any e5
vector, and e5 (the request's embedding, shared with the router) confirms the rest.

A hot reload (api/reload.py) swaps the decision (``replace_decision``: threshold, guards,
verifier, the reranker's minimum score) and the tenants' shared scopes (``replace_scopes``);
the entries, the index and the embedder stay.  The next lookup is judged by the new decision.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from hybrid_gateway.cache.semantic import cascade as cascading
from hybrid_gateway.cache.semantic.backend import SemanticBackend
from hybrid_gateway.cache.semantic.cache import Namespace, SemanticLookup
from hybrid_gateway.cache.semantic.cascade import CascadeStep
from hybrid_gateway.cache.semantic.decision import DecisionRule
from hybrid_gateway.cache.semantic.hygiene import NoiseStripper, SemanticKey, semantic_key
from hybrid_gateway.cache.semantic.rerank import Reranker
from hybrid_gateway.cache.semantic.settings import RerankerConfig
from hybrid_gateway.embedding.base import AsyncEmbedder, Vector
from hybrid_gateway.embedding.batching import ClientLeft, EmbedderSaturated
from hybrid_gateway.embedding.lazy import (
    LazyEmbedding,
    attach_embedding,
    attach_static,
    client_check,
    request_embedding,
    static_embedding,
)
from hybrid_gateway.stores.base import StoreUnavailable
from hybrid_gateway.types import CachedAnswer, CacheOutcome, ChatRequest, RequestRecord, Usage

log = logging.getLogger(__name__)

_PENDING = "semantic_key"
_CHECKS = "cache_checks"
EMBEDDER_BUSY = "embedder_busy"  # cache_checks of a request that skipped the cache: queue full
CLIENT_LEFT = "client_left"  # ... whose embedding was dropped: its client had hung up
# record.extra key: the entry a miss's nearest candidate was, when only the threshold refused
# it (its similarity is the record's): what ``learning.audit.near_miss`` audits
NEAR_MISS = "cache_near"


@dataclass(frozen=True, slots=True)
class SemanticHit:
    answer: CachedAnswer
    similarity: float
    entry_id: int


@dataclass(frozen=True, slots=True)
class RerankStep:
    reranker: Reranker
    min_score: float
    cosine_weight: float = 0.0  # the rule: score + cosine_weight * cosine >= min_score


def scope_of(tenant: str, shared_scopes: Mapping[str, str]) -> str:
    """The cache scope of a tenant: its declared shared scope, or its own."""
    shared = shared_scopes.get(tenant)
    return f"scope:{shared}" if shared is not None else f"tenant:{tenant}"


class SemanticStage:
    def __init__(
        self,
        cache: SemanticBackend,
        embedder: AsyncEmbedder,
        *,
        stripper: NoiseStripper,
        shared_scopes: Mapping[str, str],
        rerank: RerankStep | None = None,
        write_behind: bool = False,
        write_behind_max_pending: int = 256,
        cascade: CascadeStep | None = None,
    ) -> None:
        self.cache = cache
        self.embedder = embedder
        self.stripper = stripper
        self.shared_scopes = shared_scopes
        self._rerank = rerank
        self._write_behind = write_behind
        self._max_pending = write_behind_max_pending
        self._writes: set[asyncio.Task[None]] = set()
        self.writes_dropped = 0  # write-behind writes refused because too many were pending
        self._cascade = cascade
        if cascade is not None:  # the index is judged by the static bound, e5 by the threshold
            self.cache.rule = cascading.cascade_rule(cache.rule, cascade)

    @property
    def threshold(self) -> float:
        """The hit threshold now (e5's with the cascade); a reload or the learned one moves it."""
        return self.cache.rule.threshold

    def store_status(self) -> dict[str, object] | None:
        """For ``/healthz``: the shared vectors' store (None: the entries live in-process)."""
        health = self.cache.health
        return None if health is None else {"backend": "postgres", **health.status()}

    def namespace(self, tenant: str) -> Namespace:
        index = self.embedder if self._cascade is None else self._cascade.static
        return Namespace(scope_of(tenant, self.shared_scopes), index.namespace)

    def prepare(self, request: ChatRequest, record: RequestRecord) -> SemanticKey | None:
        key = semantic_key(request, self.stripper)
        if key is None:
            return None
        if request_embedding(record) is None:
            lazy = LazyEmbedding(self.embedder, key.question, client_check(record))
            attach_embedding(record, lazy)
        if self._cascade is not None:
            static = LazyEmbedding(self._cascade.static, key.question, client_check(record))
            attach_static(record, static)
        record.extra[_PENDING] = key
        return key

    def replace_decision(self, rule: DecisionRule, reranker: RerankerConfig | None) -> None:
        """Hot reload: the next lookup is judged by ``rule`` and the reranker's ``min_score`` and
        ``cosine_weight`` (its model stays: changing it needs a restart)."""
        if self._cascade is not None:
            rule = cascading.cascade_rule(rule, self._cascade)
        self.cache.rule = rule
        if self._rerank is not None and reranker is not None:
            self._rerank = RerankStep(self._rerank.reranker, reranker.min_score,
                                      reranker.cosine_weight)  # fmt: skip

    def replace_scopes(self, shared_scopes: Mapping[str, str]) -> None:
        """Hot reload of the tenants: which tenants share a cache namespace from now on."""
        self.shared_scopes = shared_scopes

    async def lookup(self, record: RequestRecord) -> SemanticHit | None:
        """After ``prepare``: the nearest stored question, judged; None on a miss."""
        key = record.extra.get(_PENDING)
        lazy = request_embedding(record)
        if not isinstance(key, SemanticKey) or lazy is None:
            return None
        index = lazy if self._cascade is None else static_embedding(record)
        if index is None:
            return None
        try:
            vector = await index.vector()
            found = await self.cache.lookup(self.namespace(record.tenant), key.bucket,
                                            key.question, vector)  # fmt: skip
        except StoreUnavailable:  # semantic_on_outage: bypass (counted by the store's health)
            record.extra[_CHECKS] = "store_down"
            return None
        except EmbedderSaturated as exc:  # overload: skip the cache rather than wait for a vector
            record.cache = CacheOutcome.BYPASS
            record.extra[_CHECKS] = CLIENT_LEFT if isinstance(exc, ClientLeft) else EMBEDDER_BUSY
            return None
        except Exception as exc:  # the cache must never fail a request
            log.warning("semantic cache lookup failed: %r", exc)
            record.extra[_CHECKS] = "error"
            return None
        if found.verdict is None or found.entry is None:
            return None
        e5: float | None = None
        if self._cascade is not None and found.hit:
            e5 = await self._e5_similarity(record, lazy, found.entry.question)
            if e5 is None:
                return None  # bypassed: e5 could not confirm a plausible hit
        verdict, entry = found.verdict, found.entry
        record.similarity = verdict.similarity
        passed = list(verdict.passed)
        failed = list(verdict.failed)
        if self._cascade is not None:
            self._confirmed(found, e5, record, passed, failed)
        if verdict.hit and not self._same_beyond_cut(key.question, entry.question):
            failed.append("truncated_tail")
        if verdict.hit and not failed and self._rerank is not None:
            ok = await self._reranked(key.question, entry.question, verdict.similarity)
            (passed if ok else failed).append("reranker")
        record.extra[_CHECKS] = ",".join([*passed, *(f"!{f}" for f in failed)])
        if failed:
            if failed == [cascading.E5_CHECK if self._cascade is not None else "threshold"]:
                record.extra[NEAR_MISS] = entry.id  # only the threshold said no
            return None
        record.extra["cache_entry"] = entry.id
        return SemanticHit(CachedAnswer(entry.body, entry.usage, entry.created_at),
                           verdict.similarity, entry.id)  # fmt: skip

    async def store(self, record: RequestRecord, body: bytes, usage: Usage) -> None:
        if self._cascade is None and record.cache is CacheOutcome.BYPASS:
            return  # its lookup found e5 saturated: its vector would queue there again
        key = record.extra.get(_PENDING)
        lazy = (request_embedding(record) if self._cascade is None
                else static_embedding(record))  # fmt: skip
        if not isinstance(key, SemanticKey) or lazy is None:
            return
        try:
            vector = await lazy.vector()
        except Exception as exc:  # no vector, nothing to store (logged where it failed)
            log.debug("semantic cache store skipped: %r", exc)
            return
        if not self._write_behind:
            await self._put(record, key, vector, body, usage)
        elif len(self._writes) >= self._max_pending:
            self.writes_dropped += 1
        else:
            task = asyncio.ensure_future(self._put(record, key, vector, body, usage))
            self._writes.add(task)
            task.add_done_callback(self._writes.discard)

    async def _put(
        self, record: RequestRecord, key: SemanticKey, vector: Vector, body: bytes, usage: Usage
    ) -> None:
        try:
            entry_id = await self.cache.put(self.namespace(record.tenant), key.bucket,
                                            key.question, vector, body, usage)  # fmt: skip
        except StoreUnavailable:
            return
        except Exception as exc:
            log.warning("semantic cache store failed: %r", exc)
            return
        if entry_id is not None:
            record.extra["cache_entry"] = entry_id

    async def flush(self) -> None:
        """Wait for the write-behind writes queued so far."""
        while self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    async def aclose(self) -> None:
        await self.flush()
        await self.cache.aclose()
        if self._cascade is not None:
            await cascading.aclose(self._cascade)
        if self._rerank is not None:
            await self._rerank.reranker.aclose()

    async def _e5_similarity(
        self, record: RequestRecord, lazy: LazyEmbedding, candidate: str
    ) -> float | None:
        """e5's cosine of the question and the candidate; None when e5 cannot say (busy, slow,
        failing): the cache is then bypassed, as when the embedder is busy without a cascade."""
        assert self._cascade is not None
        try:
            return await cascading.e5_similarity(self._cascade, self.embedder, lazy, candidate)
        except EmbedderSaturated as exc:
            reason = CLIENT_LEFT if isinstance(exc, ClientLeft) else EMBEDDER_BUSY
        except TimeoutError:
            reason = cascading.EMBEDDER_SLOW
        except Exception as exc:
            log.warning("semantic cache: e5 confirmation failed: %r", exc)
            reason = cascading.EMBEDDER_ERROR
        record.cache = CacheOutcome.BYPASS
        record.extra[_CHECKS] = reason
        return None

    def _confirmed(
        self,
        found: SemanticLookup,
        e5: float | None,
        record: RequestRecord,
        passed: list[str],
        failed: list[str],
    ) -> None:
        """The cascade's checks: a certain miss names the static bound; a plausible hit is
        e5's to decide (the similarity shown is then e5's)."""
        assert self._cascade is not None and found.verdict is not None
        if "threshold" in failed:
            failed[failed.index("threshold")] = cascading.STATIC_BOUND
        if "threshold" in passed:
            passed[passed.index("threshold")] = cascading.STATIC_BOUND
        if e5 is not None:
            record.similarity = e5
            ok = e5 >= self.cache.rule.threshold
            (passed if ok else failed).append(cascading.E5_CHECK)

    def _same_beyond_cut(self, question: str, candidate: str) -> bool:
        """With ``embedding.max_tokens`` the vectors saw only each text's prefix: what lies
        beyond it must then be the same, word for word (a shared opening must not make two
        documents one)."""
        cut = getattr(self.embedder, "embedded_text", None)
        if not callable(cut):
            return True
        head_q, head_c = str(cut(question)), str(cut(candidate))
        if head_q == question and head_c == candidate:
            return True
        return question[len(head_q) :] == candidate[len(head_c) :]

    async def _reranked(self, question: str, candidate: str, similarity: float) -> bool:
        step = self._rerank
        assert step is not None
        try:
            score = await step.reranker.score(question, candidate)
            return score + step.cosine_weight * similarity >= step.min_score
        except Exception as exc:  # a reranker that cannot answer says no
            log.warning("reranker failed: %r", exc)
            return False
