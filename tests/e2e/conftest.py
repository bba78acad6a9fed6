from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.stack import Gateway, channel, closed_port, emulator, gateway, write_config

# Extra lanes whose channels fail in scripted ways (the emulator's model-name behaviours).
FAULTS: dict[str, dict[str, Any]] = {
    "fault-reset": {"model": "m@reset"},
    "fault-502": {"model": "m@status=502"},
    "fault-400": {"model": "m@status=400"},
    "fault-429": {"model": "m@status=429"},
    "fault-midstream": {"model": "m@midstream-reset"},
    "fault-stall": {"model": "m@stall=5", "timeout_s": 0.25},
    # One slot and a short queue deadline: a second request while one is in flight gets 503.
    "narrow": {"model": "m@stall=3", "max_concurrency": 1, "queue_timeout_s": 0.6},
    # Resilience: fails once, then answers (a retry saves it) ...
    "flaky": {"model": "m@fail-first=1@status=502"},
    # ... and a primary that always fails, with a healthy backup for when its breaker opens.
    "failover": {"model": "m@status=502"},
}

# Short waits so the fault lanes stay fast; a generous retry floor so test order does not matter.
RESILIENCE: dict[str, Any] = {
    "retry": {"backoff_s": [0.01, 0.02], "max_retry_after_s": 0.05, "budget_min_per_s": 5},
    "breaker": {"min_requests": 20, "error_rate": 0.2, "open_s": 30},
}


def e2e_config(light_url: str, heavy_url: str, log_path: Path) -> dict[str, Any]:
    channels = {
        "light-emu": channel(light_url + "/v1", "light-model"),
        "heavy-emu": channel(heavy_url + "/v1", "heavy-model", price_per_1m_input=2.0,
                             price_per_1m_output=6.0),
        "refused": channel(f"http://127.0.0.1:{closed_port()}/v1", "m", connect_timeout_s=1),
        "failover-backup": channel(light_url + "/v1", "light-model"),
    }  # fmt: skip
    for name, spec in FAULTS.items():
        channels[name] = channel(light_url + "/v1", **spec)
    lanes = {name: {"channel": name} for name in [*FAULTS, "refused"]}
    lanes |= {"light": {"channel": "light-emu"}, "heavy": {"channel": "heavy-emu"}}
    lanes["failover"] = {"channel": "failover", "backup": "failover-backup"}
    models = [{"id": "auto"}, {"id": "light", "lane": "light"}, {"id": "heavy", "lane": "heavy"}]
    models += [{"id": name, "lane": name} for name in [*FAULTS, "refused"]]
    return {
        "server": {"host": "127.0.0.1", "port": 0, "max_body_bytes": 64 * 1024,
                   "request_log": {"path": str(log_path), "flush_interval_ms": 50}},
        "channels": channels,
        "lanes": lanes,
        "models": models,
        "routing": {"default_lane": "heavy", "rules": [
            {"name": "how-to-keywords", "when": {"keywords_any": ["how do i install", "怎么调用"]},
             "lane": "light"},
            {"name": "short-single-turn", "when": {"max_chars": 60, "max_user_turns": 1},
             "lane": "light"},
        ]},
        "cache": {"exact": {"enabled": True, "ttl_s": 600, "max_entries": 1000}},
        "resilience": RESILIENCE,
    }  # fmt: skip


@pytest.fixture(scope="session")
def emulators(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    logs = tmp_path_factory.mktemp("emulators")
    with (
        emulator(logs, "light-emu", "--profile", "light", "--model", "light-model") as light,
        emulator(logs, "heavy-emu", "--profile", "heavy", "--model", "heavy-model") as heavy,
    ):
        yield light.url, heavy.url


@pytest.fixture(scope="session")
def sdk(stack: Gateway) -> Iterator[openai.OpenAI]:
    """The official SDK pointed at the gateway; no retries, so every answer is the first one."""
    with openai.OpenAI(base_url=stack.base_url, api_key="x", max_retries=0, timeout=30) as client:
        yield client


@pytest.fixture(scope="session")
def stack(
    emulators: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    folder = tmp_path_factory.mktemp("gateway")
    config = e2e_config(*emulators, folder / "requests.sqlite3")
    with gateway(write_config(folder / "gateway.yaml", config)) as running:
        yield running
