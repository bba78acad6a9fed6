"""Security review, API keys: stored only as SHA-256, never in an error body, never in a log.

Against the security stack (``security_stack.py``), which runs at DEBUG log level so that
every log line the gateway can write is written.  "Never in a log" is checked on every file
the gateway wrote: its stdout and stderr, the request log's SQLite file (and WAL), the
request log's journal files, the semantic cache's and the key store's files, for every secret
the stack knows (tenant keys and their secret halves, keys made over the admin API, the admin
key, the upstream keys).
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

from tests.hardening.security_stack import (
    Answer,
    Secure,
    call,
    chat,
    is_openai_error,
    secret_part,
    unique,
)


def _made_key(secure: Secure, tenant: str = "acme") -> dict[str, str]:
    made = call(secure.url + "/admin/keys", "POST", {"tenant": tenant, "name": "security-review"},
                token=secure.admin_key)  # fmt: skip
    assert made.status == 201, made.body
    return dict(made.json())


def _key_files(secure: Secure) -> list[Path]:
    return sorted(secure.folder.glob("keys.sqlite3*"))


def test_keys_are_stored_as_sha256_only(secure: Secure) -> None:
    made = _made_key(secure)  # through the admin API, as well as the fixture's store.create
    keys = [*secure.keys.values(), made["key"]]
    with sqlite3.connect(secure.folder / "keys.sqlite3") as db:
        stored = dict(db.execute("SELECT id, key_sha256 FROM api_keys").fetchall())
    for key in keys:
        key_id = key.split("_")[1]
        assert stored[key_id] == hashlib.sha256(key.encode()).digest()
    files = _key_files(secure)
    assert [p.name for p in files if p.name == "keys.sqlite3"]
    for path in files:
        data = path.read_bytes()
        for key in keys:
            assert key.encode() not in data and secret_part(key).encode() not in data, path.name


def _refusals(secure: Secure, presented: str) -> list[Answer]:
    """The same bad key at every endpoint that takes one."""
    url = secure.url
    body = {"model": "light", "messages": [{"role": "user", "content": "hi"}]}
    return [
        call(url + "/v1/chat/completions", "POST", body, token=presented),
        call(url + "/v1/models", token=presented),
        call(url + "/v1/models/light", token=presented),
        call(url + "/v1/feedback", "POST", {"request_id": "req_1", "rating": "up"},
             token=presented),
        call(url + "/v1/feedback/req_1", token=presented),
        call(url + "/v1/gateway/results/req_1", token=presented),
    ]  # fmt: skip


def test_error_bodies_never_echo_a_key(secure: Secure) -> None:
    acme = secure.keys["acme"]
    revoked = _made_key(secure)
    gone = call(f"{secure.url}/admin/keys/{revoked['id']}", "DELETE", token=secure.admin_key)
    assert gone.status == 200
    presented = [
        acme[:-4] + "AAAA",  # the right id, a wrong secret
        acme[:-1],  # truncated
        acme + "x",
        revoked["key"],  # a revoked key
        "hgw_000000000000_" + secret_part(acme),  # someone else's secret on an unknown id
        "sk-" + secret_part(acme),  # not even our format
    ]
    for key in presented:
        for answer in _refusals(secure, key):
            assert is_openai_error(answer, 401, "invalid_api_key"), (key, answer.body)
            for secret in (key, secret_part(key) if key.startswith("hgw_") else key[3:]):
                assert secret.encode() not in answer.body, answer.body
                assert secret not in str(answer.headers)
    revoked_answer = _refusals(secure, revoked["key"])[0]
    assert "revoked" in revoked_answer.json()["error"]["message"]  # says why, not what
    admin = call(secure.url + "/admin/keys", token=acme)
    assert is_openai_error(admin, 401, "invalid_admin_key") and acme.encode() not in admin.body


def _flushed(log: Path, request_id: str) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with sqlite3.connect(log) as db:
            query = "SELECT 1 FROM requests WHERE request_id = ?"
            if db.execute(query, (request_id,)).fetchone():
                return True
        time.sleep(0.05)
    return False


def test_no_secret_in_any_file_the_gateway_writes(secure: Secure) -> None:
    made = _made_key(secure, "beta")
    # Traffic that logs: answers, cache hits, failures, refusals with and without keys.
    assert chat(secure, "acme", "log this answer", **unique()).status == 200
    assert chat(secure, "acme", "a failover", "failover", **unique()).status == 200
    call(secure.url + "/v1/chat/completions", "POST", {"model": "light"},
         token=made["key"])  # fmt: skip
    call(secure.url + "/v1/chat/completions", "POST", {}, token=made["key"][:-2] + "zz")
    call(secure.url + "/admin/keys", token=secure.admin_key[:-1])
    last = chat(secure, "beta", "the last one", **unique())
    assert _flushed(secure.folder / "requests.sqlite3", last.headers["x-request-id"])
    files = [p for p in secure.folder.rglob("*") if p.is_file() and p.name != "gateway.yaml"]
    names = {p.name for p in files}
    assert "gateway-secure.stderr.log" in names and "requests.sqlite3" in names
    assert any(".journal." in name for name in names), names
    # The stderr log is read whatever it holds; with the access log off, the gateway writes
    # lines there only for failures of its own (a 500's traceback, a store outage).
    secrets = [*secure.secrets(), made["key"], secret_part(made["key"])]
    for path in files:
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, f"a secret in {path.name}"
