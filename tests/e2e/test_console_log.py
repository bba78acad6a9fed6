"""The console log of a real ``serve`` process: every line structured (JSON or logfmt), one
request line per chat completion with every field, retries as WARNING, a 5xx as ERROR, the
config summary at start-up, and never an API key or a prompt."""

from __future__ import annotations

import json
import shlex
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from hybrid_gateway.observability.logs import REQUEST_FIELDS
from hybrid_gateway.tenancy.keys import KeyStore
from hybrid_gateway.tools.processes import python_module_argv, start_process, stop_process
from tests.e2e.conftest import e2e_config
from tests.e2e.stack import write_config

UPSTREAM_ENV = "HGW_E2E_UPSTREAM_KEY"

Line = dict[str, Any]


def parse_logfmt(line: str) -> Line:
    return dict(part.split("=", 1) for part in shlex.split(line))


PARSERS: dict[str, Callable[[str], Line]] = {"json": json.loads, "logfmt": parse_logfmt}


@dataclass(frozen=True)
class Run:
    fmt: str
    stdout: str
    stderr: str
    lines: list[Line]
    ids: dict[str, str]  # what was asked -> its x-request-id
    secrets: list[str]  # keys and prompts, none of which may be logged

    def request_line(self, name: str) -> Line:
        found = [ln for ln in self.lines if ln["msg"] == "request" and
                 ln.get("request_id") == self.ids[name]]  # fmt: skip
        assert len(found) == 1, f"{name}: {found}"
        return found[0]

    def value(self, line: Line, key: str) -> str:
        """A field as text: logfmt has no types, JSON's are compared as the same text."""
        raw = line[key]
        if self.fmt == "logfmt":
            return str(raw)
        return "" if raw is None else str(raw).lower() if isinstance(raw, bool) else str(raw)


def ask(client: openai.OpenAI, model: str, text: str, **extra: Any) -> str:
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": text}], max_tokens=8, **extra
    )
    if extra.get("stream"):
        for _ in raw.parse():
            pass
    return str(raw.headers["x-request-id"])


def ask_failing(client: openai.OpenAI, model: str, text: str) -> str:
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": text}])
    return str(info.value.response.headers["x-request-id"])


@pytest.fixture(scope="module", params=["json", "logfmt"])
def run(
    request: pytest.FixtureRequest,
    emulators: tuple[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Run:
    fmt: str = request.param
    folder = tmp_path_factory.mktemp(f"console-{fmt}")
    config = e2e_config(*emulators, folder / "requests.sqlite3")
    config["server"]["log"] = {"format": fmt, "level": "INFO"}
    config["auth"] = {"enabled": True, "keys_path": "keys.sqlite3", "admin_key_env": None}
    config["tenants"] = {"acme": {}}
    config["channels"]["light-emu"]["api_key_env"] = UPSTREAM_ENV
    path = write_config(folder / "gateway.yaml", config)
    store = KeyStore(folder / "keys.sqlite3")
    client_key = store.create("acme", "wiki", "console", now=0.0).key
    store.close()
    upstream_key = "sk-upstream-" + uuid.uuid4().hex
    prompts = {name: f"console {name} {uuid.uuid4().hex}" for name in
               ("miss", "stream", "fault", "unknown")}  # fmt: skip
    argv = python_module_argv("hybrid_gateway.cli", "serve", "--config", str(path))
    with pytest.MonkeyPatch.context() as env:
        env.setenv(UPSTREAM_ENV, upstream_key)
        process = start_process(f"gateway-{fmt}", argv, folder / "logs", timeout_s=30)
    try:
        sdk = openai.OpenAI(base_url=process.url + "/v1", api_key=client_key, max_retries=0)
        with sdk:
            ids = {
                "miss": ask(sdk, "light", prompts["miss"]),
                "hit": ask(sdk, "light", prompts["miss"]),
                "stream": ask(sdk, "light", prompts["stream"], stream=True),
                "fault": ask_failing(sdk, "fault-502", prompts["fault"]),
                "unknown": ask_failing(sdk, "no-such-model", prompts["unknown"]),
            }
    finally:
        stop_process(process)
    stderr = process.stderr_path.read_text()
    lines = [PARSERS[fmt](line) for line in stderr.splitlines()]  # each line parses
    return Run(fmt, process.stdout_path.read_text(), stderr, lines, ids,
               [client_key, upstream_key, *prompts.values()])  # fmt: skip


def test_every_request_has_one_line_with_every_field(run: Run) -> None:
    for name in run.ids:
        line = run.request_line(name)
        assert set(REQUEST_FIELDS) <= set(line), set(REQUEST_FIELDS) - set(line)
        assert run.value(line, "tenant") == "acme" and run.value(line, "app") == "wiki"
    miss = run.request_line("miss")
    assert run.value(miss, "level") == "INFO" and run.value(miss, "status") == "200"
    assert (run.value(miss, "lane"), run.value(miss, "channel")) == ("light", "light-emu")
    assert run.value(miss, "rule") == "model:light" and run.value(miss, "cache") == "miss"
    assert float(miss["latency_ms"]) > 0 and float(miss["cost_usd"]) > 0
    assert run.value(miss, "retries") == "0" and run.value(miss, "fallback") == ""
    hit = run.request_line("hit")
    assert run.value(hit, "cache") == "exact" and float(hit["cost_usd"]) == 0
    stream = run.request_line("stream")
    assert run.value(stream, "stream") == "true" and float(stream["ttft_ms"]) > 0
    unknown = run.request_line("unknown")
    assert run.value(unknown, "status") == "404" and run.value(unknown, "level") == "INFO"
    assert run.value(unknown, "error") == "model_not_found"


def test_a_5xx_is_an_error_and_each_retry_a_warning(run: Run) -> None:
    fault = run.request_line("fault")
    assert run.value(fault, "level") == "ERROR" and run.value(fault, "status") == "502"
    assert run.value(fault, "channel") == "fault-502" and run.value(fault, "retries") == "2"
    retries = [ln for ln in run.lines if ln["msg"] == "retry"]
    assert len(retries) == 2
    for line in retries:
        assert run.value(line, "level") == "WARNING"
        assert line["request_id"] == run.ids["fault"] and line["channel"] == "fault-502"


def test_start_up_logs_the_config_summary_and_no_secret_or_prompt_is_logged(run: Run) -> None:
    messages = [str(line["msg"]) for line in run.lines]
    assert any(msg.endswith("gateway.yaml: ok") for msg in messages)
    assert "lane light -> light-emu" in messages
    assert "gateway listening on" in run.stdout
    for secret in run.secrets:
        assert secret not in run.stderr and secret not in run.stdout
    assert "Traceback" not in run.stderr
