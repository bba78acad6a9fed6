"""The tenancy facade as the API layer uses it: identify, admit, settle."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hybrid_gateway.config import parse_config
from hybrid_gateway.errors import AuthenticationFailed, InsufficientQuota, RateLimited
from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.tenancy.admission import UNAUTHENTICATED, Tenancy, build_tenancy
from hybrid_gateway.tenancy.keys import KeyStore
from hybrid_gateway.types import CacheOutcome, ChatRequest, RequestRecord, RouteDecision, Usage

NOW = 1_764_400_000.0  # 2025-11-29T07:06:40Z


def config(**sections: Any) -> Any:
    data: dict[str, Any] = {
        "channels": {"a": {"base_url": "http://127.0.0.1:1/v1", "model": "m"}},
        "lanes": {"light": {"channel": "a"}, "heavy": {"channel": "a"}},
        "models": [{"id": "auto"}, {"id": "heavy", "lane": "heavy"}],
        "auth": {"admin_key_env": None},
        **sections,
    }
    return parse_config(data)


@pytest.fixture
def build(tmp_path: Path) -> Iterator[Any]:
    made: list[Tenancy] = []

    def _build(clock: ManualClock | None = None, **sections: Any) -> Tenancy:
        tenancy = build_tenancy(
            config(**sections), keys_path=tmp_path / "keys.sqlite3", clock=clock or ManualClock(),
            log_query=None, wall=lambda: NOW,
        )  # fmt: skip
        made.append(tenancy)
        return tenancy

    yield _build
    for tenancy in made:
        tenancy.aclose()


def chat(text: str, model: str = "auto") -> ChatRequest:
    messages = [{"role": "user", "content": text}]
    return ChatRequest(model, messages, False, False, {"model": model, "messages": messages})


def record() -> RequestRecord:
    return RequestRecord(request_id="req_x", started_at=NOW)


def test_auth_off_everyone_is_the_default_tenant(build: Any) -> None:
    tenancy = build()
    rec = record()
    tenancy.identify(None, rec)
    assert (rec.tenant, rec.app) == ("default", "default")
    tenancy.admit(chat("hi"), rec)
    tenancy.settle(rec)
    assert tenancy.parts.keys is None  # no key store opened without auth or an admin key


def test_auth_on_a_key_names_the_tenant_and_a_bad_one_is_logged_unauthenticated(
    build: Any, tmp_path: Path
) -> None:
    store = KeyStore(tmp_path / "keys.sqlite3")
    new = store.create("acme", "wiki", "", now=NOW)
    store.close()
    tenancy = build(auth={"enabled": True, "keys_path": "unused", "admin_key_env": None},
                    tenants={"acme": {}})  # fmt: skip
    rec = record()
    tenancy.identify(f"Bearer {new.key}", rec)
    assert (rec.tenant, rec.app) == ("acme", "wiki")
    bad = record()
    with pytest.raises(AuthenticationFailed):
        tenancy.identify("Bearer hgw_000000000000_nope", bad)
    assert (bad.tenant, bad.app) == (UNAUTHENTICATED, UNAUTHENTICATED)


async def test_token_quota_is_debited_by_the_prompt_and_trued_up_by_the_usage(
    build: Any,
) -> None:
    clock = ManualClock()
    tenancy = build(clock, tenants={"default": {"rate": {"tokens_per_min": 120}}})  # 2 per s
    first = record()
    tenancy.admit(chat("one two three"), first)
    admitted = first.extra["admitted_tokens"]
    assert 6 < admitted < 20  # 3 words + chat framing
    first.usage = Usage(admitted, 200)
    tenancy.settle(first)  # 200 more tokens than admitted: the bucket is in debt
    with pytest.raises(RateLimited) as refused:
        tenancy.admit(chat("again"), record())
    assert refused.value.status == 429 and refused.value.code == "rate_limit_exceeded"
    assert refused.value.retry_after_s > 1
    await clock.advance(refused.value.retry_after_s)
    tenancy.admit(chat("again"), record())


def test_a_cache_hit_gives_its_token_estimate_back(build: Any) -> None:
    tenancy = build(tenants={"default": {"rate": {"tokens_per_min": 60}}})
    for _ in range(20):  # far more than 60 tokens' worth of prompts, all answered from cache
        rec = record()
        tenancy.admit(chat("the same question again"), rec)
        rec.cache, rec.usage = CacheOutcome.EXACT, Usage(9, 50)
        tenancy.settle(rec)


def test_settled_cost_reaches_the_budget(build: Any) -> None:
    tenancy = build(tenants={"default": {"budget": {"daily": 0.01}}})
    rec = record()
    route = RouteDecision("heavy", "a", "default")
    assert tenancy.tiers.apply(rec, route) is route
    rec.cost_usd = 0.02
    tenancy.settle(rec)
    with pytest.raises(InsufficientQuota):
        tenancy.tiers.apply(record(), route)
