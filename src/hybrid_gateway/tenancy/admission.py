"""The tenancy facade the API layer talks to: authenticate, admit, tier, settle.

    authenticate   Authorization header -> Identity (tenant, app)        401
    admit          the model's lane allowed for the tenant?              403
                   rate quotas (tenant, then global)                     429 + Retry-After
    tiers          (pipeline, after routing) lanes and budget            moved, or 402
    settle         (after the answer) budget debit, token correction

Built once per app from the config (``build_tenancy``); a hot reload of ``tenants`` or
``limits`` swaps in new parts that keep the buckets and the spend (``tenancy/reload.py``).
With ``auth.enabled: false`` every request is tenant ``default``, app ``default``; quotas,
lanes and budgets configured for a tenant named ``default`` still apply.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hybrid_gateway.accounting.tokens import count_prompt_tokens
from hybrid_gateway.config import GatewayConfig
from hybrid_gateway.errors import AuthenticationFailed, RateLimited
from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.routing.rules import message_text
from hybrid_gateway.stores.base import StoreUnavailable
from hybrid_gateway.stores.limits import SharedRateLimiter
from hybrid_gateway.stores.shared import SharedState
from hybrid_gateway.tenancy.auth import (
    ANONYMOUS,
    AdminGuard,
    Authenticator,
    Identity,
    read_admin_key,
)
from hybrid_gateway.tenancy.budgets import BudgetBook, Query
from hybrid_gateway.tenancy.keys import KeyStore
from hybrid_gateway.tenancy.ratelimit import Decision, RateLimiter
from hybrid_gateway.tenancy.settings import BudgetConfig, RateQuota, TenantConfig, tenant_names
from hybrid_gateway.tenancy.tiers import TierPolicy
from hybrid_gateway.types import ADMITTED_TOKENS, CacheOutcome, ChatRequest, RequestRecord

__all__ = [
    "Tenancy", "TenancyParts", "build_tenancy", "rate_quotas", "tenant_budgets", "tier_policy",
]  # fmt: skip

_log = logging.getLogger(__name__)

# The tenant and app a request without a valid key is logged under.
UNAUTHENTICATED = "unauthenticated"
_UPSTREAM_ANSWERED = (CacheOutcome.MISS, CacheOutcome.BYPASS)


@dataclass(frozen=True, slots=True)
class TenancyParts:
    authenticator: Authenticator | None  # None: auth disabled
    keys: KeyStore | None  # open when auth is on or the admin API is enabled
    limiter: RateLimiter | SharedRateLimiter  # the second with stores.backend redis
    tiers: TierPolicy
    book: BudgetBook
    admin: AdminGuard
    wall: Callable[[], float]  # epoch seconds (key timestamps, budget periods)
    log_query: Query | None = None  # the request log, to sum a tenant's spend from


class Tenancy:
    def __init__(self, parts: TenancyParts) -> None:
        self.parts = parts
        self._limiter = parts.limiter
        # True with a shared (Redis) limiter: admission must be awaited (``admit_async``); the
        # in-process limiter keeps the plain call, with no coroutine on the request path.
        self.admits_async = not isinstance(parts.limiter, RateLimiter)

    def adopt(self, parts: TenancyParts) -> None:
        """Hot reload: the next request is admitted and tiered by ``parts``."""
        self.parts = parts
        self._limiter = parts.limiter

    @property
    def tiers(self) -> TierPolicy:
        return self.parts.tiers

    def authenticate(self, authorization: str | None) -> Identity:
        """The caller, or ``AuthenticationFailed`` (401)."""
        auth = self.parts.authenticator
        return ANONYMOUS if auth is None else auth.authenticate(authorization)

    def identify(self, authorization: str | None, record: RequestRecord) -> None:
        """``authenticate`` and put the caller on the record (``unauthenticated`` on a 401)."""
        try:
            identity = self.authenticate(authorization)
        except AuthenticationFailed:
            record.tenant, record.app = UNAUTHENTICATED, UNAUTHENTICATED
            raise
        record.tenant, record.app = identity.tenant, identity.app

    def admit(self, request: ChatRequest, record: RequestRecord) -> None:
        """Lane permission for an explicit model, then the rate quotas (in-process limiter)."""
        limiter = self._limiter
        if not isinstance(limiter, RateLimiter):
            raise TypeError("a shared rate limiter is awaited: use admit_async")
        tokens = self._tokens(request, record)
        self._apply(limiter.admit(record.tenant, tokens), record, tokens)

    async def admit_async(self, request: ChatRequest, record: RequestRecord) -> None:
        """``admit`` for either limiter: the shared one asks the store (one round trip)."""
        limiter = self._limiter
        tokens = self._tokens(request, record)
        if isinstance(limiter, RateLimiter):
            decision = limiter.admit(record.tenant, tokens)
        else:
            decision = await limiter.admit(record.tenant, tokens)
        self._apply(decision, record, tokens)

    def _tokens(self, request: ChatRequest, record: RequestRecord) -> int:
        self.parts.tiers.check_model(record.tenant, request.model)
        if not self._limiter.counts_tokens(record.tenant):
            return 0
        return count_prompt_tokens(message_text(m.get("content")) for m in request.messages)

    def _apply(self, decision: Decision, record: RequestRecord, tokens: int) -> None:
        tenant = record.tenant
        if not decision.allowed:
            wait = math.ceil(decision.retry_after_s)
            raise RateLimited(
                f"Rate limit reached ({decision.limit}) for tenant '{tenant}'; "
                f"try again in {max(wait, 1)} s.",
                retry_after_s=decision.retry_after_s,
            )
        record.extra[ADMITTED_TOKENS] = tokens

    def settle(self, record: RequestRecord) -> None:
        """A finished request: debit its cost, true up its tokens."""
        self.parts.book.debit(record.tenant, record.cost_usd, record.started_at, record.request_id)
        admitted = record.extra.get(ADMITTED_TOKENS)
        if isinstance(admitted, int):
            usage = record.usage
            used = usage.total_tokens if usage and record.cache in _UPSTREAM_ANSWERED else 0
            self._limiter.correct(record.tenant, used - admitted)

    def aclose(self) -> None:
        if self.parts.authenticator is not None:
            self.parts.authenticator.flush()
        if self.parts.keys is not None:
            self.parts.keys.close()


def build_tenancy(
    config: GatewayConfig,
    *,
    keys_path: Path,
    clock: Clock,
    log_query: Query | None,
    wall: Callable[[], float] = time.time,
    shared: SharedState | None = None,
) -> Tenancy:
    """Everything from ``config.auth``, ``config.tenants`` and ``config.limits``.

    ``log_query`` reads the request log (to rebuild budget spend); None without a log.
    With ``shared`` (stores.backend redis) the rate buckets and budget spend live in Redis.
    """
    tenants = config.tenants
    admin_key = read_admin_key(config.auth)
    keys = KeyStore(keys_path) if config.auth.enabled or admin_key is not None else None
    authenticator = None
    if config.auth.enabled and keys is not None:
        authenticator = Authenticator(keys, tenant_names(tenants), wall)
    budgets = tenant_budgets(tenants)
    book = BudgetBook(budgets) if shared is None else shared.budget_book(budgets)
    if log_query is not None and book.active and shared is None:
        try:
            book.rebuild(log_query, wall())
        except StoreUnavailable:  # records: postgres, unreachable at start (docs/scale-out.md)
            _log.warning("budget spend starts at zero: the request log's database is down")
    tiers = tier_policy(config, book, wall)
    limiter: RateLimiter | SharedRateLimiter = (
        RateLimiter(rate_quotas(tenants), config.limits.global_, clock)
        if shared is None
        else shared.limiter(tenants, config.limits)
    )
    admin = AdminGuard(admin_key, config.auth.admin_key_env)
    return Tenancy(TenancyParts(authenticator, keys, limiter, tiers, book, admin, wall, log_query))


def tier_policy(config: GatewayConfig, book: BudgetBook, wall: Callable[[], float]) -> TierPolicy:
    return TierPolicy(
        config.tenants,
        {name: lane.channel for name, lane in config.lanes.items()},
        {m.id: m.lane for m in config.models},
        book,
        wall,
    )


def rate_quotas(tenants: Mapping[str, TenantConfig]) -> dict[str, RateQuota]:
    return {name: t.rate for name, t in tenants.items() if t.rate is not None}


def tenant_budgets(tenants: Mapping[str, TenantConfig]) -> dict[str, BudgetConfig]:
    return {name: t.budget for name, t in tenants.items() if t.budget is not None}
