"""Security review, tenant isolation: one tenant never sees another's cached answers, deferred
results or feedback (the cross-tenant cache leak is a known failure of gateways in this field).

Two tenants, ``acme`` and ``beta``, each with its own API key, on the security stack
(``security_stack.py``: exact and semantic cache on, a deadline-fallback lane).  Whether an
id exists is not told across tenants: another tenant's id answers exactly like an unknown one.
"""

from __future__ import annotations

import time

from tests.hardening.security_stack import Secure, call, chat, is_openai_error, unique

QUESTION = "信用卡怎么激活"
PARAPHRASE = "信用卡如何激活？"


def test_the_caches_are_per_tenant_exact_and_semantic(secure: Secure) -> None:
    mark = len(secure.upstream.snapshot())
    first = chat(secure, "acme", QUESTION)
    assert first.status == 200 and first.headers["x-gateway-cache"] == "miss"
    assert chat(secure, "acme", QUESTION).headers["x-gateway-cache"] == "exact"
    paraphrase = chat(secure, "acme", PARAPHRASE)
    assert paraphrase.headers["x-gateway-cache"] == "semantic"  # the semantic cache is on
    # beta asks acme's exact question: acme's entry is an exact match and a cosine-1.0
    # semantic match, yet beta's answer comes from the upstream.
    other = chat(secure, "beta", QUESTION)
    assert other.status == 200 and other.headers["x-gateway-cache"] == "miss"
    assert chat(secure, "beta", PARAPHRASE).headers["x-gateway-cache"] == "semantic"  # its own
    chats = [s for s in secure.upstream.snapshot()[mark:] if s.path == "/v1/chat/completions"]
    assert len(chats) == 2  # acme's miss and beta's miss


def _late_result(secure: Secure) -> tuple[str, str]:
    answer = chat(secure, "acme", "a slow question only acme may read", "slow", **unique())
    assert answer.status == 200 and answer.headers["x-gateway-fallback"] == "timeout"
    return answer.headers["x-request-id"], secure.url + answer.headers["x-gateway-result-url"]


def test_another_tenants_deferred_result_is_404(secure: Secure) -> None:
    request_id, url = _late_result(secure)
    for _ in range(2):  # while pending, then once done
        stranger = call(url, token=secure.keys["beta"])
        assert is_openai_error(stranger, 404, "request_not_found"), stranger.body
        unknown = call(url[: -len(request_id)] + "req_" + "0" * 32, token=secure.keys["beta"])
        assert unknown.status == 404 and unknown.json()["error"]["code"] == "request_not_found"
        assert is_openai_error(call(url), 401, "invalid_api_key")
        deadline = time.monotonic() + 10
        while (owner := call(url, token=secure.keys["acme"])).status == 202:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert owner.status == 200 and owner.json()["object"] == "chat.completion"


def test_another_tenant_can_neither_read_nor_write_feedback(secure: Secure) -> None:
    answer = chat(secure, "acme", "rate me, acme", **unique())
    request_id = answer.headers["x-request-id"]
    feedback = secure.url + "/v1/feedback"
    stranger = call(feedback, "POST", {"request_id": request_id, "rating": "down"},
                    token=secure.keys["beta"])  # fmt: skip
    assert is_openai_error(stranger, 404, "request_not_found"), stranger.body
    owner = call(feedback, "POST", {"request_id": request_id, "rating": "up"},
                 token=secure.keys["acme"])  # fmt: skip
    assert owner.status == 200, owner.body
    read = call(f"{feedback}/{request_id}", token=secure.keys["beta"])
    assert is_openai_error(read, 404, "request_not_found"), read.body
    again = call(feedback, "POST", {"request_id": request_id, "rating": "down"},
                 token=secure.keys["beta"])  # fmt: skip
    assert again.status == 404
    assert call(f"{feedback}/{request_id}", token=secure.keys["acme"]).json()["rating"] == "up"
    assert is_openai_error(call(f"{feedback}/{request_id}"), 401, "invalid_api_key")
