"""Security review, what leaves the gateway: upstream keys, webhooks, public endpoints.

- each channel's upstream key goes to that channel only, on the plain path, the failover to a
  backup and the deadline fallback alike, and the client's own ``Authorization`` never goes
  upstream (a channel without ``api_key_env`` gets no ``Authorization`` at all);
- late answers go to the configured webhook only: URLs in the body (``metadata``, ``user``,
  unknown fields) or in headers never make the gateway call anyone;
- ``/metrics``, ``/healthz``, ``/dashboard/data.json`` and ``/openapi.json`` hold no secret.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson

from tests.hardening.security_stack import (
    MODELS,
    STALL_S,
    UPSTREAM_KEYS,
    Secure,
    Seen,
    call,
    chat,
    is_openai_error,
    secret_part,
    unique,
)

# model the upstream sees -> the Authorization it must carry (None: no header at all)
EXPECTED_AUTH: dict[str, str | None] = {
    MODELS[name]: f"Bearer {value}" for name, (_, value) in UPSTREAM_KEYS.items()
} | {MODELS["open"]: None}


def _chats_since(stack: Secure, mark: int) -> list[Seen]:
    return [s for s in stack.upstream.snapshot()[mark:] if s.path == "/v1/chat/completions"]


def _wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _assert_keys_went_to_their_channels(seen: list[Seen], stack: Secure) -> None:
    client_keys = [*stack.keys.values(), *map(secret_part, stack.keys.values())]
    for request in seen:
        assert request.model in EXPECTED_AUTH, request
        assert request.headers.get("Authorization") == EXPECTED_AUTH[request.model], request
        everything = orjson.dumps(request.headers) + request.body
        for secret in client_keys:
            assert secret.encode() not in everything, "a client key went upstream"


def test_each_channel_gets_its_own_key_and_never_the_clients(secure: Secure) -> None:
    mark = len(secure.upstream.snapshot())
    for model in ("light", "heavy", "open"):
        answer = chat(secure, "acme", f"which key do you hold, {model}?", model, **unique())
        assert answer.status == 200, answer.body
    seen = _chats_since(secure, mark)
    assert sorted(str(s.model) for s in seen) == sorted(
        MODELS[c] for c in ("alpha", "bravo", "open")
    )
    _assert_keys_went_to_their_channels(seen, secure)
    assert "Authorization" not in next(s for s in seen if s.model == MODELS["open"]).headers


def test_the_failover_to_a_backup_sends_the_backups_key(secure: Secure) -> None:
    mark = len(secure.upstream.snapshot())
    answer = chat(secure, "acme", "will the backup answer this?", "failover", **unique())
    assert answer.status == 200 and answer.headers["x-gateway-fallback"] == "failover"
    seen = _chats_since(secure, mark)
    assert {s.model for s in seen} == {MODELS["broken"], MODELS["alpha"]}
    _assert_keys_went_to_their_channels(seen, secure)


def test_the_deadline_fallback_sends_each_lane_its_own_key(secure: Secure) -> None:
    mark = len(secure.upstream.snapshot())
    answer = chat(secure, "beta", "a question for the slow lane", "slow", **unique())
    assert answer.status == 200 and answer.headers["x-gateway-fallback"] == "timeout"
    _wait_for(lambda: len(_chats_since(secure, mark)) == 2)
    seen = _chats_since(secure, mark)
    assert {s.model for s in seen} == {MODELS["slow"], MODELS["alpha"]}
    _assert_keys_went_to_their_channels(seen, secure)


def test_urls_in_requests_never_make_the_gateway_call_out(secure: Secure) -> None:
    trap = secure.trap.url
    for field in ("webhook", "callback_url", "webhook_url", "notify_url"):
        answer = chat(secure, "acme", "call me back", "slow", **{field: f"{trap}/{field}"})
        assert is_openai_error(answer, 400, "unsupported_parameter"), answer.body
    # Accepted fields holding URLs, on the one path that does call out (a deadline fallback
    # delivers its late answer to the configured webhook), and URL-ish headers.
    hooks_before = sum(s.path == "/hook" for s in secure.upstream.snapshot())
    answer = call(
        secure.url + "/v1/chat/completions", "POST",
        {"model": "slow", "messages": [{"role": "user", "content": f"see {trap}/content"}],
         "metadata": {"webhook": f"{trap}/metadata", "callback_url": f"{trap}/metadata"},
         "user": f"{trap}/user", **unique()},
        token=secure.keys["acme"],
        headers={"X-Webhook-Url": f"{trap}/header", "X-Callback-Url": f"{trap}/header",
                 "Forwarded": "host=evil.example", "X-Forwarded-Host": "evil.example"},
    )  # fmt: skip
    assert answer.status == 200 and answer.headers["x-gateway-fallback"] == "timeout"
    request_id = answer.headers["x-request-id"]

    def delivered() -> bool:
        hooks = [s for s in secure.upstream.snapshot() if s.path == "/hook"]
        return len(hooks) > hooks_before and any(request_id.encode() in s.body for s in hooks)

    _wait_for(delivered)  # the late answer went where the config says ...
    time.sleep(STALL_S / 2)  # ... and, given the time, nowhere else
    assert secure.trap.snapshot() == []


def test_public_endpoints_hold_no_secret(secure: Secure) -> None:
    assert chat(secure, "acme", "something for the metrics", **unique()).status == 200
    assert call(secure.url + "/admin/keys", token="wrong-admin-key").status == 401
    for path in ("/metrics", "/healthz", "/dashboard/data.json", "/openapi.json", "/dashboard",
                 "/v1/models"):  # fmt: skip
        answer = call(secure.url + path, token=secure.keys["acme"])
        assert answer.status == 200, path
        for secret in secure.secrets():
            assert secret.encode() not in answer.body, (path, "holds a secret")
            assert secret not in orjson.dumps(answer.headers).decode(), (path, "header secret")
    listing = call(secure.url + "/admin/keys", token=secure.admin_key)
    assert listing.status == 200 and listing.json()["data"]
    for key in secure.keys.values():
        assert secret_part(key).encode() not in listing.body
