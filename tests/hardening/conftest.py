"""A real gateway on loopback in front of two zero-delay emulators, for the API fuzzing.

Zero-delay emulators answer at once, so hundreds of generated requests fit in seconds; the
scripted-fault lanes let generated requests reach the documented upstream failures too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hybrid_gateway.tools.processes import stop_process
from tests.e2e.stack import Gateway, channel, emulator, start_gateway, write_config
from tests.hardening.security_stack import secure  # noqa: F401  (the security review's stack)

# The admin API is on, so the fuzzer gets past its auth with this key (and is refused without).
ADMIN_KEY_ENV = "HYBRID_GATEWAY_FUZZ_ADMIN_KEY"
ADMIN_KEY = "fuzz-admin-key"

# Served model id -> the emulator model name of its channel (scripted faults by suffix).
FUZZ_LANES: dict[str, dict[str, Any]] = {
    "light": {"model": "light-model"},
    "heavy": {"model": "heavy-model"},
    "fault-502": {"model": "m@status=502"},
    "fault-reset": {"model": "m@reset"},
    "fault-midstream": {"model": "m@midstream-reset"},
    "fault-429": {"model": "m@status=429"},
    "fault-stall": {"model": "m@stall=2", "timeout_s": 0.2},
}
# One slot, an answer streamed over seconds: for the hang-up test, not for the fuzzer.
NARROW_SLOW: dict[str, Any] = {"model": "m@slow=1", "max_concurrency": 1, "queue_timeout_s": 3}


@pytest.fixture(scope="session")
def fuzz_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    folder = tmp_path_factory.mktemp("fuzz")
    with (
        emulator(folder, "light-emu", "--zero-delay", "--model", "light-model") as light,
        emulator(folder, "heavy-emu", "--zero-delay", "--model", "heavy-model") as heavy,
    ):
        upstream = {"light": light.url, "heavy": heavy.url}
        lanes = {**FUZZ_LANES, "narrow-slow": NARROW_SLOW}
        channels = {
            name: channel(upstream.get(name, light.url) + "/v1", **spec)
            for name, spec in lanes.items()
        }
        config = {
            "server": {"host": "127.0.0.1", "port": 0, "max_body_bytes": 64 * 1024,
                       "request_log": {"path": str(folder / "requests.sqlite3")}},
            "channels": channels,
            "lanes": {name: {"channel": name} for name in lanes},
            "models": [{"id": "auto"}, *({"id": name, "lane": name} for name in lanes)],
            "routing": {"default_lane": "heavy", "rules": [
                {"name": "short", "when": {"max_chars": 40}, "lane": "light"}]},
            "cache": {"exact": {"enabled": True, "max_entries": 200}},
            "resilience": {"retry": {"backoff_s": [0.01], "max_retry_after_s": 0.02}},
        }  # fmt: skip
        config["auth"] = {"admin_key_env": ADMIN_KEY_ENV, "keys_path": str(folder / "keys.db")}
        config_path = write_config(folder / "gateway.yaml", config)
        with pytest.MonkeyPatch.context() as env:  # the child copies our environment at start
            env.setenv(ADMIN_KEY_ENV, ADMIN_KEY)
            running = start_gateway(config_path)
        try:
            yield running
        finally:
            stop_process(running.process)
