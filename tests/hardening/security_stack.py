"""The gateway the security review runs against, and the recording servers around it.

One gateway process on loopback with API keys on (tenants ``acme`` and ``beta``), the admin
API, the exact and the semantic cache, a deadline fallback with a webhook, and five channels
in front of one recording upstream: four with their own ``api_key_env`` (light, heavy, a
failing primary with a backup, a slow lane), one with none.  The upstream is a small aiohttp
server in a thread of the test process (not the emulator) because the point is to see what
arrives: every request's path, model and headers are kept.  A second recorder, the *trap*,
stands for a host an attacker would like the gateway to call: it must never hear from it.
"""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from hybrid_gateway.tenancy.keys import KeyStore
from hybrid_gateway.tools.processes import (
    ManagedProcess,
    python_module_argv,
    start_process,
    stop_process,
)
from tests.e2e.stack import channel, write_config

ADMIN_ENV = "HGW_SEC_ADMIN_KEY"
ADMIN_KEY = "admin-secret-" + uuid.uuid4().hex
# channel -> (env var, recognisable secret value, the model name the upstream sees)
UPSTREAM_KEYS: dict[str, tuple[str, str]] = {
    "alpha": ("HGW_SEC_ALPHA_KEY", "sk-alpha-" + uuid.uuid4().hex),
    "bravo": ("HGW_SEC_BRAVO_KEY", "sk-bravo-" + uuid.uuid4().hex),
    "broken": ("HGW_SEC_BROKEN_KEY", "sk-broken-" + uuid.uuid4().hex),
    "slow": ("HGW_SEC_SLOW_KEY", "sk-slow-" + uuid.uuid4().hex),
}
MODELS = {"alpha": "alpha-model", "bravo": "bravo-model", "broken": "fail-model",
          "slow": "stall-model", "open": "open-model"}  # fmt: skip
LIMITS = {"max_body_bytes": 64 * 1024, "max_header_bytes": 8192, "max_messages": 64}
STALL_S = 1.0


@dataclass(frozen=True)
class Seen:
    path: str
    model: str | None
    headers: dict[str, str]
    body: bytes


@dataclass
class Recorder:
    """An aiohttp server in its own thread that keeps every request it gets."""

    seen: list[Seen] = field(default_factory=list)
    url: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> list[Seen]:
        with self._lock:
            return list(self.seen)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        model = None
        if raw.startswith(b"{"):
            parsed = orjson.loads(raw)
            model = parsed.get("model") if isinstance(parsed, dict) else None
        with self._lock:
            headers = {str(name): value for name, value in request.headers.items()}
            self.seen.append(Seen(request.path, model, headers, raw))
        if request.path != "/v1/chat/completions":
            return web.Response(text="ok")
        if model == MODELS["broken"]:
            return web.json_response({"error": {"message": "down"}}, status=502)
        if model == MODELS["slow"]:
            await asyncio.sleep(STALL_S)
        return web.json_response(_completion(str(model)))


def _completion(model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex, "object": "chat.completion",
        "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": f"answer from {model}"}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
    }  # fmt: skip


@contextmanager
def recorders(count: int) -> Iterator[list[Recorder]]:
    """``count`` recorders on loopback ports, served by one event loop in a thread."""
    made = [Recorder() for _ in range(count)]
    loop = asyncio.new_event_loop()
    runners: list[web.AppRunner] = []

    async def start() -> None:
        for recorder in made:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", recorder.handle)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            runners.append(runner)
            recorder.url = f"http://127.0.0.1:{runner.addresses[0][1]}"

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    try:
        yield made
    finally:

        async def stop() -> None:
            for runner in runners:
                await runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def secret_part(key: str) -> str:
    """``hgw_<id>_<secret>`` -> ``<secret>`` (which may itself hold ``_``)."""
    return key.split("_", 2)[2]


@dataclass(frozen=True)
class Secure:
    folder: Path
    process: ManagedProcess
    upstream: Recorder
    trap: Recorder
    keys: dict[str, str]  # tenant -> API key

    @property
    def url(self) -> str:
        return self.process.url

    @property
    def admin_key(self) -> str:
        return ADMIN_KEY

    def secrets(self) -> list[str]:
        """Every secret this stack knows: tenant keys (and their secret halves), the admin
        key, the upstream keys."""
        out = [*self.keys.values(), ADMIN_KEY, *(v for _, v in UPSTREAM_KEYS.values())]
        return out + [secret_part(key) for key in self.keys.values()]


def secure_config(folder: Path, upstream: str, hook: str) -> dict[str, Any]:
    channels: dict[str, Any] = {
        name: channel(upstream + "/v1", MODELS[name], api_key_env=env)
        for name, (env, _) in UPSTREAM_KEYS.items()
    }
    channels["open"] = channel(upstream + "/v1", MODELS["open"])
    return {
        "server": {"host": "127.0.0.1", "port": 0, **LIMITS,
                   "request_log": {"path": str(folder / "requests.sqlite3"),
                                   "flush_interval_ms": 50}},
        "channels": channels,
        "lanes": {
            "light": {"channel": "alpha"}, "heavy": {"channel": "bravo"},
            "failover": {"channel": "broken", "backup": "alpha", "retry_on_backup": True},
            "slow": {"channel": "slow", "deadline_s": 0.3, "fallback_lane": "light"},
            "open": {"channel": "open"},
        },
        "models": [{"id": "auto"}, *({"id": lane, "lane": lane}
                   for lane in ("light", "heavy", "failover", "slow", "open"))],
        "routing": {"default_lane": "heavy"},
        "cache": {"exact": {"enabled": True},
                  "semantic": {"enabled": True, "path": str(folder / "semantic.sqlite3"),
                               "threshold": 0.98}},
        "resilience": {"retry": {"backoff_s": [0.01]},
                       "breaker": {"min_requests": 1000},
                       "deferred": {"webhook": {"url": hook, "backoff_s": [0.05]}}},
        "auth": {"enabled": True, "keys_path": str(folder / "keys.sqlite3"),
                 "admin_key_env": ADMIN_ENV},
        "tenants": {"acme": {}, "beta": {}},
    }  # fmt: skip


@contextmanager
def secure_stack(folder: Path) -> Iterator[Secure]:
    with recorders(2) as (upstream, trap):
        config = secure_config(folder, upstream.url, upstream.url + "/hook")
        config_path = write_config(folder / "gateway.yaml", config)
        store = KeyStore(folder / "keys.sqlite3")
        keys = {t: store.create(t, "default", "", now=0.0).key for t in ("acme", "beta")}
        store.close()
        # DEBUG logging, so that the "no key in any log line" check has every line to read.
        argv = python_module_argv("hybrid_gateway.cli", "serve", "--config", str(config_path),
                                  "--log-level", "DEBUG")  # fmt: skip
        with pytest.MonkeyPatch.context() as env:  # the child copies our environment at start
            env.setenv(ADMIN_ENV, ADMIN_KEY)
            for variable, value in UPSTREAM_KEYS.values():
                env.setenv(variable, value)
            process = start_process("gateway-secure", argv, folder / "logs", timeout_s=60)
        try:
            yield Secure(folder, process, upstream, trap, keys)
        finally:
            stop_process(process)


@pytest.fixture(scope="session")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    with secure_stack(tmp_path_factory.mktemp("secure")) as stack:
        yield stack


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)

    def error_code(self) -> str | None:
        return str(self.json()["error"]["code"])


def call(
    url: str,
    method: str = "GET",
    body: Any = None,
    *,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> Answer:
    """One HTTP request; any status is an answer (no exception for 4xx/5xx)."""
    sent = {"Content-Type": "application/json", **(headers or {})}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    data = raw if raw is not None else (None if body is None else orjson.dumps(body))
    request = urllib.request.Request(url, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return Answer(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, dict(exc.headers), exc.read())


def chat(stack: Secure, tenant: str, content: str, model: str = "light", **extra: Any) -> Answer:
    body = {"model": model, "messages": [{"role": "user", "content": content}], **extra}
    return call(stack.url + "/v1/chat/completions", "POST", body, token=stack.keys[tenant])


def unique() -> dict[str, Any]:
    """A request that neither cache can answer: its own seed is its own cache partition (the
    semantic cache strips ids from the text, so a uuid in the question would not do)."""
    return {"seed": int(uuid.uuid4().int % 2**31)}


def is_openai_error(answer: Answer, status: int, code: str) -> bool:
    error = answer.json()["error"]
    return (
        answer.status == status
        and error["code"] == code
        and error["request_id"] == answer.headers["x-request-id"]
        and set(error) == {"message", "type", "param", "code", "request_id"}
    )
