"""Tenants end to end: API keys, the admin API, lanes, rate limits and budgets, through the
official SDK against a gateway process with ``auth.enabled``."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from hybrid_gateway.tenancy.keys import KeyStore
from hybrid_gateway.tools.processes import (
    ManagedProcess,
    child_env,
    python_module_argv,
    start_process,
    stop_process,
)
from tests.e2e.conftest import e2e_config
from tests.e2e.stack import Gateway, write_config

ADMIN_ENV = "HGW_E2E_ADMIN_KEY"
ADMIN_KEY = "adm_" + uuid.uuid4().hex
TENANTS: dict[str, Any] = {
    "acme": {},
    "basic": {"lanes": ["light"]},
    "limited": {"rate": {"requests_per_s": 0.01, "burst": 2}},
    "capped": {"budget": {"daily": 1e-9, "on_exceed": "refuse"}},
    "thrifty": {"budget": {"daily": 1e-9, "on_exceed": "downgrade", "downgrade_lane": "light"}},
}


@dataclass
class Tenanted:
    folder: Path
    config_path: Path
    process: ManagedProcess
    keys: dict[str, str]  # tenant -> key

    @property
    def base_url(self) -> str:
        return self.process.url + "/v1"

    def sdk(self, key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0, timeout=30)


def tenanted_config(emulators: tuple[str, str], folder: Path) -> Path:
    config = e2e_config(*emulators, folder / "requests.sqlite3")
    config["auth"] = {"enabled": True, "keys_path": "keys.sqlite3", "admin_key_env": ADMIN_ENV}
    config["tenants"] = TENANTS
    return write_config(folder / "gateway.yaml", config)


def start(config_path: Path, name: str) -> ManagedProcess:
    # DEBUG logging, so that the "keys never in a log line" check below has lines to look at.
    argv = python_module_argv("hybrid_gateway.cli", "serve", "--config", str(config_path),
                              "--log-level", "DEBUG")  # fmt: skip
    with pytest.MonkeyPatch.context() as env:
        env.setenv(ADMIN_ENV, ADMIN_KEY)
        return start_process(name, argv, config_path.parent / "logs", timeout_s=30)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    argv = python_module_argv("hybrid_gateway.cli", *args)
    return subprocess.run(argv, env=child_env(), capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def tenanted(
    emulators: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Tenanted]:
    folder = tmp_path_factory.mktemp("tenanted")
    config_path = tenanted_config(emulators, folder)
    made = cli("keys", "create", "--config", str(config_path), "--tenant", "acme",
               "--app", "wiki", "--name", "e2e")  # fmt: skip
    assert made.returncode == 0, made.stderr
    keys = {"acme": made.stdout.strip()}
    store = KeyStore(folder / "keys.sqlite3")
    for tenant in TENANTS:
        if tenant != "acme":
            keys[tenant] = store.create(tenant, "default", "", now=0.0).key
    store.close()
    process = start(config_path, "gateway-tenanted")
    try:
        yield Tenanted(folder, config_path, process, keys)
    finally:
        stop_process(process)


def call(
    url: str, method: str, path: str, body: Any = None, token: str | None = None
) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def ask(client: openai.OpenAI, model: str = "auto", text: str | None = None) -> Any:
    content = text or f"how do I install it? {uuid.uuid4().hex}"
    return client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": content}]
    )


def test_a_key_names_tenant_and_app_and_no_key_is_401(tenanted: Tenanted) -> None:
    with tenanted.sdk(tenanted.keys["acme"]) as client:
        raw = ask(client)
        assert raw.http_response.status_code == 200
        rid = raw.headers["x-request-id"]
        assert "auto" in {m.id for m in client.models.list()}
    body = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
    status, error = call(tenanted.process.url, "POST", "/v1/chat/completions", body)
    assert status == 401 and error["error"]["code"] == "invalid_api_key"
    for bad in ["sk-something", tenanted.keys["acme"][:-3] + "xyz"]:
        with tenanted.sdk(bad) as client, pytest.raises(openai.AuthenticationError) as exc:
            ask(client)
        assert exc.value.code == "invalid_api_key"
    with tenanted.sdk("nope") as client, pytest.raises(openai.AuthenticationError):
        client.models.list()
    log = tenanted.folder / "requests.sqlite3"
    row = _log_row(log, rid)
    assert row == ("acme", "wiki")


def _log_row(log: Path, rid: str) -> tuple[str, str] | None:
    for _ in range(100):  # the log is fed in batches every 50 ms
        with sqlite3.connect(log) as db:
            row = db.execute("SELECT tenant, app FROM requests WHERE request_id = ?", (rid,))
            found = row.fetchone()
        if found is not None:
            return (str(found[0]), str(found[1]))
        time.sleep(0.05)
    return None


def test_admin_api_creates_lists_and_revokes_and_a_revoked_key_is_refused_at_once(
    tenanted: Tenanted,
) -> None:
    url = tenanted.process.url
    assert call(url, "GET", "/admin/keys")[0] == 401
    status, body = call(url, "GET", "/admin/keys", token="wrong")
    assert status == 401 and body["error"]["code"] == "invalid_admin_key"
    assert body["error"]["request_id"].startswith("req_")
    status, body = call(url, "POST", "/admin/keys", {"tenant": "nobody"}, ADMIN_KEY)
    assert status == 400 and body["error"]["param"] == "tenant"
    status, made = call(url, "POST", "/admin/keys", {"tenant": "acme", "app": "crm"}, ADMIN_KEY)
    assert status == 201 and made["key"].startswith("hgw_") and made["app"] == "crm"
    status, listing = call(url, "GET", "/admin/keys", token=ADMIN_KEY)
    assert status == 200
    entry = next(k for k in listing["data"] if k["id"] == made["id"])
    assert "key" not in entry and not entry["revoked"]
    assert made["key"] not in json.dumps(listing)

    with tenanted.sdk(made["key"]) as client:
        assert ask(client).http_response.status_code == 200  # the key is now cached
        status, revoked = call(url, "DELETE", f"/admin/keys/{made['id']}", token=ADMIN_KEY)
        assert status == 200 and revoked["revoked"]
        with pytest.raises(openai.AuthenticationError, match="revoked"):
            ask(client)
    assert call(url, "DELETE", "/admin/keys/000000000000", token=ADMIN_KEY)[0] == 404


def test_a_revoke_from_the_command_line_reaches_the_running_gateway(tenanted: Tenanted) -> None:
    store = KeyStore(tenanted.folder / "keys.sqlite3")
    new = store.create("acme", "default", "", now=0.0)
    store.close()
    with tenanted.sdk(new.key) as client:
        assert ask(client).http_response.status_code == 200
        done = cli("keys", "revoke", "--config", str(tenanted.config_path), new.record.id)
        assert done.returncode == 0, done.stderr
        with pytest.raises(openai.AuthenticationError, match="revoked"):
            ask(client)
    listing = cli("keys", "list", "--config", str(tenanted.config_path), "--json")
    entries = {k["id"]: k for k in json.loads(listing.stdout)}
    assert entries[new.record.id]["revoked"]
    assert new.key not in listing.stdout


def test_lanes_an_explicit_model_is_403_routed_traffic_moves(tenanted: Tenanted) -> None:
    with tenanted.sdk(tenanted.keys["basic"]) as client:
        with pytest.raises(openai.PermissionDeniedError) as exc:
            ask(client, model="heavy")
        assert exc.value.code == "model_not_allowed"
        # No rule matches a long question: the default lane (heavy) is not allowed to 'basic'.
        raw = ask(client, text="Please compare these designs in depth. " * 3 + uuid.uuid4().hex)
        assert raw.headers["x-gateway-route"].startswith("lane=light; channel=light-emu;")
        assert raw.headers["x-gateway-route"].endswith("rule=default+tier:heavy->light")


def test_rate_limit_429_with_retry_after(tenanted: Tenanted) -> None:
    with tenanted.sdk(tenanted.keys["limited"]) as client:
        ask(client)
        ask(client)  # the burst of 2
        with pytest.raises(openai.RateLimitError) as exc:
            ask(client)
    assert exc.value.code == "rate_limit_exceeded"
    retry_after = int(exc.value.response.headers["retry-after"])
    assert 90 <= retry_after <= 100  # one request per 100 s; just under 100 s to go


def test_budget_refuse_then_downgrade(tenanted: Tenanted) -> None:
    with tenanted.sdk(tenanted.keys["capped"]) as client:
        ask(client, model="heavy")  # spend 0: allowed; its cost passes the tiny cap
        with pytest.raises(openai.APIStatusError) as exc:
            ask(client, model="heavy")
    assert exc.value.status_code == 402 and exc.value.code == "insufficient_quota"
    with tenanted.sdk(tenanted.keys["thrifty"]) as client:
        first = ask(client, model="heavy")
        assert "x-gateway-fallback" not in first.headers
        second = ask(client, model="heavy")
    assert second.headers["x-gateway-fallback"] == "budget"
    assert second.headers["x-gateway-route"].startswith("lane=light;")
    assert "budget:heavy->light" in second.headers["x-gateway-route"]


def test_cost_metrics_per_tenant_and_app(tenanted: Tenanted) -> None:
    with tenanted.sdk(tenanted.keys["acme"]) as client:
        ask(client)
    with urllib.request.urlopen(tenanted.process.url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    assert 'hybrid_gateway_tenant_requests_total{tenant="acme",app="wiki"' in text
    assert 'hybrid_gateway_tenant_cost_usd_total{tenant="acme",app="wiki"' in text


def test_keys_never_appear_in_logs(tenanted: Tenanted) -> None:
    """Runs last in this module: everything above has logged what it logs by now."""
    with (
        tenanted.sdk(tenanted.keys["acme"][:-2] + "zz") as client,
        pytest.raises(openai.AuthenticationError),
    ):
        ask(client)
    stop_process(tenanted.process)  # flushes the request log
    secrets = [*tenanted.keys.values(), ADMIN_KEY]
    secrets += [k[len("hgw_") + 13 :] for k in tenanted.keys.values()]
    files = [p for p in tenanted.folder.rglob("*") if p.is_file() and p.name != "gateway.yaml"]
    assert any(p.name.endswith(".stderr.log") for p in files)
    assert any(p.name == "requests.sqlite3" for p in files)
    for path in files:
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, f"a key in {path.name}"


def test_budget_spend_survives_a_restart(emulators: tuple[str, str], tmp_path: Path) -> None:
    config_path = tenanted_config(emulators, tmp_path)
    store = KeyStore(tmp_path / "keys.sqlite3")
    key = store.create("capped", "default", "", now=0.0).key
    store.close()
    first = start(config_path, "gateway-budget-1")
    try:
        with openai.OpenAI(base_url=first.url + "/v1", api_key=key, max_retries=0) as client:
            ask(client, model="heavy")
    finally:
        stop_process(first)
    second = start(config_path, "gateway-budget-2")
    try:
        client = openai.OpenAI(base_url=second.url + "/v1", api_key=key, max_retries=0)
        with client, pytest.raises(openai.APIStatusError) as exc:
            ask(client, model="heavy")
        assert exc.value.status_code == 402
    finally:
        stop_process(second)


def test_without_an_admin_key_the_admin_api_is_403(stack: Gateway) -> None:
    """The shared e2e gateway runs with auth off and no admin key in its environment."""
    status, body = call(stack.url, "GET", "/admin/keys", token="anything")
    assert status == 403 and body["error"]["code"] == "admin_api_disabled"
    assert body["error"]["request_id"].startswith("req_")
